"""benchmarks/run_anatomy.py: a real daemon's runs, every phase from its finished line."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "run_anatomy.py"


def _script() -> ModuleType:
    return load_script(SCRIPT)


def _row(commit: str, pool: int, new: int, wall: float, train: float) -> dict[str, Any]:
    phases = {"read": wall - train, "train": train}
    row = {"commit": commit, "agent": "se_darwin", "device": "cpu", "pool": pool, "new": new}
    return row | {"phases": phases, "but_train": wall - train}


def test_new_counts_add_the_larger_pools_one_percent() -> None:
    """1% and 25% of each pool, and at 10,000 the 1,000 new of 100,000's 1%: the ratio's
    same new records; a count as large as the pool is no row."""
    anatomy = _script()
    assert anatomy.new_counts([10000, 100000, 1000000], ["1%", "25%"]) == {
        10000: [100, 1000, 2500],
        100000: [1000, 10000, 25000],
        1000000: [10000, 250000],
    }
    assert anatomy.new_counts([200], ["5", "200"]) == {200: [5]}


def test_ratios_compare_the_same_new_records_per_commit() -> None:
    """100,000 over 10,000 at 1,000 new, per commit; 25% rows take no part; over 1.5 said."""
    rows = [
        _row("a", 10000, 1000, 3.0, 1.0),
        _row("a", 10000, 2500, 9.0, 1.0),
        _row("a", 100000, 1000, 5.0, 1.0),
        _row("b", 10000, 1000, 2.0, 1.0),
        _row("b", 100000, 1000, 3.0, 1.0),
    ]
    found = {r["commit"]: r for r in _script().ratios(rows)}
    assert found["a"]["ratio"] == pytest.approx(2.0) and not found["a"]["within_1_5"]
    assert found["b"]["ratio"] == pytest.approx(2.0) and found["a"]["pools"] == [10000, 100000]
    assert found["b"]["but_train"] == [1.0, 2.0]


def test_each_ratio_says_how_much_of_its_growth_is_eval_against_the_bounds_headroom() -> None:
    """Eval's growth (the larger pool's eval less the smaller's), the growth the bound
    leaves, and the ratio without eval's growth; no eval phase: None, said as —."""
    anatomy = _script()
    small, big = _row("a", 10000, 1000, 3.0, 1.0), _row("a", 100000, 1000, 4.0, 1.0)
    small["phases"]["eval"], big["phases"]["eval"] = 0.5, 1.25  # but train: 2.0 -> 3.0
    found = anatomy.ratios([small, big, _row("b", 10000, 1000, 3.0, 1.0),
                            _row("b", 100000, 1000, 3.5, 1.0)])  # fmt: skip
    a, b = sorted(found, key=lambda r: r["commit"])
    assert a["ratio"] == pytest.approx(1.5) and a["within_1_5"]
    assert a["eval_growth"] == pytest.approx(0.75) and a["headroom"] == pytest.approx(1.0)
    assert a["ratio_rest"] == pytest.approx((3.0 - 0.75) / 2.0)
    assert b["eval_growth"] is None and b["ratio_rest"] is None
    result = {"command": "x", "host": {"cpu": "c", "cores": 2, "platform": "p"}, "torch": "t"}
    result |= {"steps": 3, "note": "", "loadavg_before": [1.0], "loadavg_after": [1.0]}
    text = anatomy.markdown({**result, "rows": [], "ratios": found})
    shown = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| a")}
    shown |= {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| b")}
    assert shown["| a"].endswith("| 0.750 | 1.000 | 1.12 |")
    assert shown["| b"].endswith("| — | 1.000 | — |")


def test_a_phase_one_commit_lacks_is_shown_missing_not_zero() -> None:
    """A phase only one row's line names: its column holds — in the other row."""
    anatomy = _script()
    rows = [_row("a", 10, 1, 3.0, 1.0), _row("b", 10, 1, 3.0, 1.0)]
    rows[0]["phases"]["drift"] = 0.25
    for row in rows:
        row.update(wall_seconds=3.0, duration_seconds=4.0, unattributed=0.0)
        row.update(outcome="success", gate="promoted", loadavg_before=[1.0, 1.0, 1.0])
    result = {"command": "x", "host": {"cpu": "c", "cores": 2, "platform": "p"}, "torch": "t"}
    result |= {"steps": 3, "note": "", "loadavg_before": [1.0], "loadavg_after": [1.0]}
    text = anatomy.markdown({**result, "rows": rows, "ratios": []})
    header, a, b = [
        line for line in text.splitlines() if line.startswith("| ") and "---" not in line
    ][:3]
    column = header.split(" | ").index("drift")
    assert a.split(" | ")[column] == "0.250" and b.split(" | ")[column] == "—"


def test_another_tree_runs_its_own_packages(tmp_path: Path) -> None:
    """--trees: the daemon's PYTHONPATH is that tree's, and not the working directory."""
    env = _script()._tree_env("se_darwin", tmp_path, Path("/elsewhere"), "cpu", 7)
    assert env["PYTHONPATH"].split(":") == [
        "/elsewhere",
        "/elsewhere/agents",
        "/elsewhere/infrastructure",
    ]
    assert env["PYTHONSAFEPATH"] == "1" and env["GENESIS_FP16_AGENTS__SE_DARWIN__STEPS"] == "7"
    assert env["GENESIS_FP16_DEVICE"] == "cpu"


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--new", "1%,x"], "--new: 'x' is neither"),
        (["--trees", "/nowhere"], "'/nowhere' is no"),
        (["--modes", "fresh,warm"], "--modes: 'fresh,warm': fresh, later, watched, comma"),
        (["--pools", "200", "--new", "100", "--modes", "watched"], "twice each count of new"),
    ],
)
def test_bad_flags_stop_in_one_line(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --new that is no share or count, a --trees that is no checkout: one line, before
    any daemon starts."""
    with pytest.raises(SystemExit) as stopped:
        _script().main(flags)
    assert stopped.value.code == 2 and said in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.slow
def test_a_tiny_pool_runs_end_to_end_through_a_real_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 records, 5 new, 3 steps: one row per device, each carrying every phase of the
    measured run's own finished line, its run and job seconds, and everything but train."""
    anatomy = _script()
    lines: list[dict[str, Any]] = []
    real_runs = anatomy._runs

    def runs(*args: Any) -> list[dict[str, Any]]:
        finished = real_runs(*args)
        lines.append(finished[-1])
        return finished

    monkeypatch.setattr(anatomy, "_runs", runs)
    out = tmp_path / "anatomy"
    result = anatomy.main(["--pools", "200", "--new", "5", "--steps", "3", "--out", str(out)])
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    assert [row["device"] for row in result["rows"]] == devices
    assert result["complete"] and json.loads(Path(f"{out}.json").read_text()) == result
    text = Path(f"{out}.md").read_text()
    for row, line in zip(result["rows"], lines[1::2], strict=True):  # (first, measured) each
        assert (row["pool"], row["new"], row["steps"]) == (200, 5, 3)
        assert row["data"]["new"] == 5  # the measured run read the new file
        assert row["phases"] == line["phases"] and row["wall_seconds"] == line["wall_seconds"]
        assert {"read", "encode", "train", "eval", "drift", "live", "gate"} <= set(row["phases"])
        assert row["but_train"] == pytest.approx(line["wall_seconds"] - line["phases"]["train"])
        assert row["worker_start"] >= 0  # the fresh daemon's run worker, in the job
        assert all(f" {name} |" in text for name in line["phases"])
    assert result["loadavg_before"] and result["loadavg_after"] and result["torch"]


@pytest.mark.slow
def test_later_measures_the_second_run_of_one_resident_process(tmp_path: Path) -> None:
    """--modes later: the first and the measured run by one daemon, so the measured run
    started no run worker (its resident run process served the first run too), and read
    the new file."""
    out = tmp_path / "anatomy"
    flags = ["--pools", "200", "--new", "5", "--steps", "3", "--modes", "later", "--out", str(out)]
    result = _script().main(flags)
    assert [row["mode"] for row in result["rows"]][:1] == ["later"]
    row = result["rows"][0]
    assert row["data"]["new"] == 5 and row["worker_start"] == 0.0  # a fresh daemon's is > 0
    assert row["first"]["steps"] == 3 and "| later |" in Path(f"{out}.md").read_text()


@pytest.mark.slow
def test_watched_measures_the_third_run_whose_watch_has_a_predecessor(tmp_path: Path) -> None:
    """--modes watched: three runs by one daemon, the measured run at the same pool after
    a middle batch; the row says each run's gate, and the measured run's watch wrote
    figures exactly when the middle run's model was promoted (it then has a predecessor).
    --work keeps the data: its old records are twice the new fewer, beside a middle
    batch, and the daemon's log says the watch's figures of the new records."""
    out, work = tmp_path / "anatomy", tmp_path / "work"
    flags = ["--pools", "200", "--new", "10", "--steps", "3", "--modes", "watched"]
    result = _script().main([*flags, "--out", str(out), "--work", str(work)])
    row = result["rows"][0]
    assert (row["mode"], row["pool"], row["new"]) == ("watched", 200, 10)
    assert len(row["gates"]) == 3 and row["watched"] == (row["gates"][1] == "promoted")
    assert row["data"]["new"] == 10 and row["worker_start"] == 0.0
    made = work / "data-200-10-middle"
    counts = {}
    for batch in ("old", "middle", "new"):
        (pool,) = (made / batch / "data").iterdir()
        counts[batch] = len(json.loads(pool.read_text())["trajectories"])
    assert counts == {"old": 180, "middle": 10, "new": 10}
    assert "| watched |" in Path(f"{out}.md").read_text()


def test_chunks_join_into_one_pool_of_every_record(tmp_path: Path) -> None:
    """A batch past CHUNK is written in chunks of their own seeds and joined into one pool
    file holding every chunk's records, in order, its counts summed."""
    from genesis_fp16_infrastructure.data.synthetic import generate_pool, write_pool

    anatomy = _script()
    assert anatomy.chunk_sizes(250_000) == [100000, 100000, 50000]
    parts = [write_pool(tmp_path / str(seed), n, seed) for n, seed in [(30, 99), (20, 99001)]]
    target = tmp_path / "pool.json"
    assert anatomy.join_pools(parts, target) == 50
    joined = json.loads(target.read_text())
    pools = [generate_pool(30, 99), generate_pool(20, 99001)]
    assert joined["trajectories"] == pools[0]["trajectories"] | pools[1]["trajectories"]
    assert list(joined["trajectories"]) == [*pools[0]["trajectories"], *pools[1]["trajectories"]]
    assert joined["total_added"] == joined["max_trajectories"] == 50
    assert joined["total_pruned"] == pools[0]["total_pruned"] + pools[1]["total_pruned"]
    with pytest.raises(SystemExit, match="a trajectory id another chunk holds"):
        anatomy.join_pools([parts[0], parts[0]], tmp_path / "twice.json")


def test_memory_names_this_process_and_its_children() -> None:
    """memory(pid): the process and each descendant, each with peak and current resident
    bytes, the peak never below the current."""
    import os
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = _script().memory(os.getpid())
    finally:
        child.kill()
        child.wait()
    pids = [p["pid"] for p in found]
    assert pids[0] == os.getpid() and child.pid in pids
    assert found[pids.index(child.pid)]["parent"] == os.getpid()
    assert all(p["peak_rss_bytes"] >= p["rss_bytes"] > 0 for p in found)


def test_kept_bytes_a_record_are_the_resident_process_less_its_run_worker() -> None:
    """The process that peaked highest is shown: its peak, its resident MiB, and that
    less its parent's (the run worker) over the pool; no figures: dashes."""
    mib = 2**20
    memory = [
        {"pid": 1, "parent": 0, "peak_rss_bytes": 50 * mib, "rss_bytes": 50 * mib},
        {"pid": 2, "parent": 1, "peak_rss_bytes": 100 * mib, "rss_bytes": 100 * mib},
        {"pid": 3, "parent": 2, "peak_rss_bytes": 300 * mib, "rss_bytes": 200 * mib},
    ]
    anatomy = _script()
    assert anatomy._memory_cells({"pool": 1024, "memory": memory}) == "300 | 200 | 102,400 |"
    assert anatomy._memory_cells({"pool": 1024}) == "— | — | — |"


def test_a_chunk_sharing_an_id_with_an_earlier_one_is_written_again_of_the_next_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunk seeds 99, 99001, ...: seed 99001's chunk shares an id with 99's, so it is
    dropped and 99002's written instead; the pool holds every record once, none lost."""
    anatomy = _script()
    written: list[int] = []

    def batch(agent: str, folder: Path, env: Any, count: int, seed: int) -> None:
        written.append(seed)
        first = 0 if seed in (99, 99001) else seed  # 99001 repeats 99's ids
        ids = [f"id-{first}-{k}" for k in range(count)]
        pool = {"max_trajectories": count, "total_added": count, "total_pruned": 0}
        pool["trajectories"] = {i: {"trajectory_id": i} for i in ids}  # type: ignore[assignment]
        (folder / "data").mkdir(parents=True, exist_ok=True)
        (folder / "data" / f"pool-{seed}.json").write_text(json.dumps(pool))

    monkeypatch.setattr(anatomy, "_batch", batch)
    monkeypatch.setattr(anatomy, "CHUNK", 3)
    anatomy._pool_batch("se_darwin", tmp_path, {}, 5, 99)
    assert written == [99, 99001, 99002]
    joined = json.loads((tmp_path / "data" / "pool-99.json").read_text())
    assert list(joined["trajectories"]) == [
        *(f"id-0-{k}" for k in range(3)),
        "id-99002-0",
        "id-99002-1",
    ]
    assert joined["total_added"] == 5 and not (tmp_path / "chunks").exists()


def test_devices_are_those_asked_in_their_order_and_cuda_only_where_torch_sees_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--devices`` names the rows' devices in the order measured; unset, the CPU and
    CUDA when present; CUDA asked where none is seen: one line, no run."""
    anatomy = _script()
    monkeypatch.setattr(anatomy.torch.cuda, "is_available", lambda: True)
    assert anatomy._devices(None) == ["cpu", "cuda"]
    assert anatomy._devices("cuda,cpu") == ["cuda", "cpu"]
    assert anatomy._devices("cuda") == ["cuda"]
    monkeypatch.setattr(anatomy.torch.cuda, "is_available", lambda: False)
    assert anatomy._devices(None) == ["cpu"]
    with pytest.raises(SystemExit, match="this host has cpu"):
        anatomy._devices("cuda")
    with pytest.raises(SystemExit):
        anatomy._devices(" , ")
