"""benchmarks/judging_floor.py: a real daemon's judging seconds against one forward of
the served model over the records its live watch and gate score."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "judging_floor.py"


def _script() -> ModuleType:
    return load_script(SCRIPT)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--pools", "10,x"], "--pools: '10,x' is not a list of counts"),
        (["--pools", "10", "--new", "10"], "must be below every pool and above 0"),
        (["--pools", "10", "--new", "5"], "must be below every pool and above 0"),
        (["--repeats", "0"], "--repeats at least 1"),
    ],
)
def test_bad_flags_stop_in_one_line(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pool that is no count, as many new records as the pool (or, with a middle batch
    of as many, half of it), no repeat: one line, before any daemon starts."""
    with pytest.raises(SystemExit) as stopped:
        _script().main(flags)
    assert stopped.value.code == 2 and said in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.slow
def test_a_tiny_pool_is_judged_and_its_forward_timed(tmp_path: Path) -> None:
    """200 records, 10 new after a middle batch of 10, 3 steps: the row's judging seconds
    are its finished line's drift, live and gate; the records scored are the labelled
    ones held out or new; the ratio is judging over the forward's median; the row says
    each run's gate and whether the measured run's watch wrote figures (only when the
    middle batch's model was promoted: then it has a predecessor)."""
    floor = _script()
    out, work = tmp_path / "floor", str(tmp_path / "work")
    flags = ["--pools", "200", "--new", "10", "--steps", "3", "--repeats", "2", "--work", work]
    result = floor.main([*flags, "--out", str(out)])
    (row,) = result["rows"]
    assert (row["pool"], row["new"], row["outcome"]) == (200, 10, "success")
    assert row["served_before"] == 2 and len(row["gates"]) == 3
    assert row["watched"] == (row["gates"][1] == "promoted")
    assert row["judging_seconds"] == pytest.approx(sum(row["judging"].values()))
    assert len(row["forward_times"]) == 2 and min(row["forward_times"]) > 0
    assert row["ratio"] == pytest.approx(row["judging_seconds"] / row["forward_seconds"])
    # The records scored, worked out again here from the data the run read.
    made = tmp_path / "work" / "data-200-10-middle"
    assert (made / "new" / "data").is_dir() and (made / "middle" / "data").is_dir()
    assert (made / "new" / "data").is_dir() and not (tmp_path / "work" / "floor-200-10").exists()
    assert 0 < row["scored_records"] <= 200
    assert json.loads(Path(f"{out}.json").read_text()) == result
    assert "| 200 | 10 |" in Path(f"{out}.md").read_text()


def test_scored_rows_are_the_held_out_and_the_new_labelled_records(tmp_path: Path) -> None:
    """Of a written pool: every labelled record in HELD_OUT's fifth or among the new
    file's ids, and no other."""
    from genesis_fp16_infrastructure.contract.split import HELD_OUT, id_hashes
    from genesis_fp16_infrastructure.data.readers import read_trajectories
    from genesis_fp16_infrastructure.data.synthetic import write_pool

    folder, made = tmp_path / "run", tmp_path / "made"
    write_pool(folder / "data", 120, 7)
    write_pool(made / "new" / "data", 15, 8)
    write_pool(folder / "data" / "zz", 15, 8)  # the new records, in the run's pool too
    columns, rows = _script().scored_rows(folder, made)
    whole = read_trajectories(folder / "data", keep_text=False).columns
    new = set(read_trajectories(made / "new" / "data", keep_text=False).columns.ids)
    labelled = whole.labelled.tolist()
    ids = [whole.ids[r] for r in labelled]
    held = HELD_OUT.of_hashes(id_hashes(ids))
    expected = [r for r, i, h in zip(labelled, ids, held, strict=True) if h or i in new]
    assert rows.tolist() == expected and any(whole.ids[r] in new for r in expected)
    assert np.array_equal(columns.id_hash, whole.id_hash)
