"""A resident run process keeps a model's outputs from run to run (issue 90, item 4:
recipes/retrain/kept_outputs.py): a later run runs the served model over the records it
has not scored alone, and what it reports is what a run that scores everything again
reports, after a relabel, an edit, another served model or a rollback; with a budget of
0 nothing is kept."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from first_served import served_checkpoint, write_pool
from se_darwin_runs import train

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.agent_folder.transitions import rollback
from genesis_fp16_infrastructure.contract.agent_snapshot import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.split import HELD_OUT, ScoreOnly
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.recipes.retrain import kept_outputs, scoring

BUDGET = 64 * 2**20


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's process starts with nothing kept (another test's store is not its)."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])


@pytest.fixture
def forwards(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each forward the scorings run."""
    rows: list[int] = []
    real = scoring.forward_chunked

    def counted(model: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        rows.append(len(x))
        return real(model, x, *args, **kwargs)

    monkeypatch.setattr(scoring, "forward_chunked", counted)
    return rows


def _plan(folder: Path) -> AgentSnapshot:
    """A daemon run's plan: the pointer and the data's scan (record cache, kept rows)."""
    return AgentSnapshot(
        pointer=read_pointer(folder / "ck"), data=DataCheck(scan_files(folder / "data")[0])
    )


def _run(folder: Path, budget: int) -> TrainResult:
    return train(
        folder / "data",
        folder / "ck",
        snapshot=_plan(folder),
        steps=40,
        keep_in_memory_bytes=budget,
    )


def _request(folder: Path, budget: int, only: list[str] | None = None) -> TrainRequest:
    return TrainRequest(
        agent="se_darwin",
        precision="fp32",  # type: ignore[arg-type]
        precision_reason="test",
        state_dir=folder,
        checkpoint_dir=folder / "ck",
        data_path=folder / "data",
        keep_in_memory_bytes=budget,
        snapshot=_plan(folder),
        score_only=None if only is None else ScoreOnly(frozenset(only)),
    )


def _edit(folder: Path, ids: list[str]) -> tuple[str, str]:
    """Relabel one held-out record (its success flipped, its inputs as they were) and
    edit another's inputs (its operator and tools), in place: their ids."""
    path = folder / "data" / "pool.json"
    pool = json.loads(path.read_text())
    records = pool["trajectories"]
    held = [i for i in ids if HELD_OUT.of_ids([i])[0]]
    ours = [i.split("#")[0] for i in held if "success_score" in records.get(i.split("#")[0], {})]
    relabelled, edited = ours[:2]
    score = records[relabelled]["success_score"]
    records[relabelled]["success_score"] = 0.95 if score < 0.5 else 0.05
    records[edited]["tools_used"] = ["never_seen_tool"]
    operators = ["baseline", "revision", "recombination", "refinement"]
    operator = records[edited]["operator_applied"]
    records[edited]["operator_applied"] = operators[(operators.index(operator) + 1) % 4]
    path.write_text(json.dumps(pool))
    return relabelled, edited


def test_a_later_scoring_runs_the_model_over_new_and_changed_records_alone(
    first: Path, tmp_path: Path, forwards: list[int]
) -> None:
    """The served model scored once; after a relabel, an edit and 300 new records, its
    next scoring forwards the edited record and the new ones (and what their lineage
    touches), not the rest, and every loss is what a scoring of everything gives: the
    relabelled record's against its new label."""
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    served = served_checkpoint(folder)
    before = scoring.score_records(served, _request(folder, BUDGET))
    assert forwards == [len(before.ids)]
    relabelled, edited = _edit(folder, list(before.ids))
    write_pool(folder / "data", "more.json", 300, seed=41)
    forwards.clear()
    after = scoring.score_records(served, _request(folder, BUDGET))
    again = scoring.score_records(served, _request(folder, 0))  # nothing kept: all scored
    assert forwards[1] == len(again.ids)
    new = sum(1 for i in after.ids if i.split("#")[0] in _ids(folder / "data" / "more.json"))
    assert 0 < new <= 300 and new + 1 <= forwards[0] <= new + 5, forwards  # edit: +lineage
    _alike(after, again)
    old = dict(zip(before.ids, before.column("log_loss"), strict=True))
    now = dict(zip(after.ids, after.column("log_loss"), strict=True))
    [was] = [old[i] for i in old if i.startswith(relabelled + "#")]
    [is_] = [now[i] for i in now if i.startswith(relabelled + "#")]
    assert abs(was - is_) > 0.1  # the same logit against the other label
    assert any(i.startswith(edited + "#") for i in now)


def _ids(path: Path) -> set[str]:
    return set(json.loads(path.read_text())["trajectories"])


def _alike(first: Any, second: Any) -> None:
    """The same records, segments and losses within a last bit of the logits."""
    assert first.ids == second.ids and first.segments == second.segments
    for name in first.metrics():
        a, b = np.asarray(first.column(name)), np.asarray(second.column(name))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_another_model_is_never_answered_from_ones_kept(
    first: Path, tmp_path: Path, forwards: list[int]
) -> None:
    """A checkpoint of other bytes (another model, trained on the same records) is scored
    in full, bit for bit as with nothing kept; the served model's bytes again, copied
    elsewhere, are answered from memory alone, bit for bit as the first time."""
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    served = served_checkpoint(folder)
    ours = scoring.score_records(served, _request(folder, BUDGET))
    trained = train(folder / "data", tmp_path / "other", seed=5, steps=40)
    assert trained.checkpoint is not None
    other = Path(trained.checkpoint)
    forwards.clear()
    theirs = scoring.score_records(other, _request(folder, BUDGET))
    alone = scoring.score_records(other, _request(folder, 0))
    assert forwards == [len(theirs.ids)] * 2
    assert np.array_equal(theirs.column("log_loss"), alone.column("log_loss"))
    assert not np.array_equal(theirs.column("log_loss"), ours.column("log_loss"))
    copy = tmp_path / "copy"
    copy.mkdir()
    for file in served.parent.glob(served.name + "*"):  # with its digest and summary
        shutil.copy(file, copy / file.name)
    forwards.clear()
    same = scoring.score_records(copy / served.name, _request(folder, BUDGET))
    assert forwards == [] and same.ids == ours.ids
    assert np.array_equal(same.column("log_loss"), ours.column("log_loss"))


def test_budget_zero_keeps_nothing(first: Path, tmp_path: Path, forwards: list[int]) -> None:
    """With a budget, a second scoring of the same model forwards nothing; with a budget
    of 0 (a forked run, ``train``), each scores every record and nothing is kept."""
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    served = served_checkpoint(folder)
    scoring.score_records(served, _request(folder, BUDGET))
    scoring.score_records(served, _request(folder, BUDGET))
    assert len(forwards) == 1
    forwards.clear()
    kept_in_memory._PROCESS[:] = []
    first_losses = scoring.score_records(served, _request(folder, 0))
    scoring.score_records(served, _request(folder, 0))
    assert forwards == [len(first_losses.ids)] * 2
    assert not kept_in_memory._PROCESS or not any(
        isinstance(k, tuple) and k[0] == kept_outputs.KIND
        for k in kept_in_memory._PROCESS[0]._entries
    )


def _figures(value: Any) -> Any:
    """A report's JSON with every number rounded to 5 significant digits (in text too):
    two scorings a last bit apart report these alike."""
    if isinstance(value, dict):
        return {k: _figures(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_figures(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.5g}") if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return re.sub(r"[-+]?\d+\.\d+(e[-+]?\d+)?", lambda m: f"{float(m[0]):.5g}", value)
    return value


def _reports(result: TrainResult) -> tuple[Any, Any]:
    gate = None if result.gate is None else result.gate.to_json()
    live = None if result.live is None else result.live.to_json()
    for report in (gate, live):
        if isinstance(report, dict):
            for key in (
                "seconds",
                "judged_at",
                "at",
                "candidate_id",
                "against",
                "served_id",
                "judged_on",
                "checkpoint",
                "served",
                "now_served",
                "updated_at",
            ):
                report.pop(key, None)
    return _figures(gate), _figures(live)


def _sequence(first: Path, folder: Path, budget: int, forwards: list[int]) -> list[Any]:
    """Runs in a resident process's memory (``budget``): 600 new records; a relabel, an
    edit and 300 more; the model before served again (a rollback) and 200 more. Each
    run's gate and live reports, and the rows its scorings forwarded."""
    shutil.copytree(first / "first", folder)
    seen = []
    write_pool(folder / "data", "more.json", 600, seed=41)
    forwards.clear()
    seen.append((*_reports(_run(folder, budget)), sum(forwards)))
    ids = list(scoring.score_records(served_checkpoint(folder), _request(folder, 0)).ids)
    _edit(folder, ids)
    write_pool(folder / "data", "later.json", 300, seed=42)
    forwards.clear()
    seen.append((*_reports(_run(folder, budget)), sum(forwards)))
    pointer = read_pointer(folder / "ck")
    assert pointer is not None and pointer.history  # a model before it to serve again
    rollback(folder / "ck")
    write_pool(folder / "data", "last.json", 200, seed=43)
    forwards.clear()
    seen.append((*_reports(_run(folder, budget)), sum(forwards)))
    return seen


def test_runs_report_what_a_run_scoring_everything_reports(
    first: Path, tmp_path: Path, forwards: list[int]
) -> None:
    """The same gate and live reports, run by run, as runs that keep nothing, after new
    records, a relabel and an edit, and a rollback to the model before; the runs that
    keep forward fewer rows."""
    kept = _sequence(first, tmp_path / "kept", BUDGET, forwards)
    kept_in_memory._PROCESS[:] = []
    full = _sequence(first, tmp_path / "full", 0, forwards)
    assert kept[1][1] is not None  # the watch reported after the edit: compared below
    for ours, theirs in zip(kept, full, strict=True):
        for mine, other in zip(ours[:2], theirs[:2], strict=True):  # gate, live
            assert (mine is None) == (other is None)
            for key in mine or {}:
                assert (key, mine[key]) == (key, other[key])
    # After the edit: the served model over the 300 new records (and the edited one with
    # what its lineage touches), the watch's predecessor over the new ones; not the
    # held-out records again. After the rollback, fewer too.
    rows = [(ours[2], theirs[2]) for ours, theirs in zip(kept, full, strict=True)]
    assert rows[1][0] <= 2 * 300 + 5 < rows[1][1] and rows[2][0] < rows[2][1], rows


def test_a_key_is_found_by_both_halves() -> None:
    """Two kept inputs that share a first hash are told apart by the second; an input
    whose second half differs from every kept one is not found."""
    keys = kept_outputs.InputKeys(np.array([5, 5, 9], np.uint64), np.array([2, 1, 7], np.uint64))
    kept = kept_outputs.KeptLogits.of(keys, np.array([0.5, 0.25, 2.0], np.float32))
    asked = kept_outputs.InputKeys(
        np.array([5, 5, 9, 9, 4], np.uint64), np.array([1, 2, 7, 8, 2], np.uint64)
    )
    hit, logit = kept.find(asked)
    assert hit.tolist() == [True, True, True, False, False]
    assert logit[:3].tolist() == [0.25, 0.5, 2.0]


@pytest.mark.parametrize("span", [4, 50, 2**62])
def test_keys_sort_and_are_found_as_both_halves_say(span: int) -> None:
    """Keys are sorted as a lexsort of both halves sorts them (repeated and shared first
    halves included), and each asked key, in any order, is found where a kept key has
    both its halves, with that key's logit (the first record's of repeated inputs)."""
    rng = np.random.default_rng(span % 997)
    for _ in range(30):
        keys = _random_keys(rng, int(rng.integers(0, 400)), span)
        order = kept_outputs._key_order(keys)
        assert order.tolist() == np.lexsort((keys.second, keys.first)).tolist()
        logit = rng.random(len(keys.first), np.float32)
        kept = kept_outputs.KeptLogits.of(keys, logit)
        first_of: dict[tuple[int, int], float] = {}
        halves = zip(keys.first.tolist(), keys.second.tolist(), strict=True)
        for pair, value in zip(halves, logit.tolist(), strict=True):
            first_of.setdefault(pair, value)
        asked = _random_keys(rng, int(rng.integers(0, 300)), span)
        hit, found = kept.find(asked)
        pairs = list(zip(asked.first.tolist(), asked.second.tolist(), strict=True))
        assert hit.tolist() == [pair in first_of for pair in pairs]
        assert found.tolist() == [np.float32(first_of.get(pair, 0.0)) for pair in pairs]
        rising = kept_outputs.InputKeys(np.sort(asked.first), asked.second)
        hit, found = kept.find(rising)  # asked in order already: no sort of them
        pairs = list(zip(rising.first.tolist(), rising.second.tolist(), strict=True))
        assert hit.tolist() == [pair in first_of for pair in pairs]


def _random_keys(rng: np.random.Generator, count: int, span: int) -> kept_outputs.InputKeys:
    """``count`` keys whose halves are drawn from ``span`` values (a small span: shared
    first hashes, repeated keys)."""
    first, second = (rng.integers(0, span, count).astype(np.uint64) for _ in range(2))
    return kept_outputs.InputKeys(first, second)


def _same(a: kept_outputs.KeptLogits, b: kept_outputs.KeptLogits) -> None:
    for name in ("first", "second", "logit"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name


@pytest.mark.parametrize("span", [4, 50, 2**62])
def test_joined_is_what_sorting_both_gives(span: int) -> None:
    """Kept logits joined with new ones (some already kept, some repeated, some sharing
    a kept key's first hash) are, bit for bit, what :meth:`KeptLogits.of` gives for both,
    the kept first; kept columns out of order are sorted with them, counted."""
    rng = np.random.default_rng(span % 1000)
    for _ in range(30):
        old = _random_keys(rng, int(rng.integers(0, 300)), span)
        kept = kept_outputs.KeptLogits.of(old, rng.random(len(old.first), np.float32))
        new = _random_keys(rng, int(rng.integers(0, 60)), span)
        logit = rng.random(len(new.first), np.float32)
        both = kept_outputs.InputKeys(
            np.concatenate([kept.first, new.first]), np.concatenate([kept.second, new.second])
        )
        _same(
            kept.joined(new, logit),
            kept_outputs.KeptLogits.of(both, np.concatenate([kept.logit, logit])),
        )
    before = kept_outputs.JOINED["sorted whole"]
    shuffled = kept_outputs.KeptLogits(kept.first[::-1], kept.second[::-1], kept.logit[::-1])
    if len(kept.first) > 1:
        both = kept_outputs.InputKeys(
            np.concatenate([shuffled.first, new.first]),
            np.concatenate([shuffled.second, new.second]),
        )
        expected = kept_outputs.KeptLogits.of(both, np.concatenate([shuffled.logit, logit]))
        _same(shuffled.joined(new, logit), expected)
        assert kept_outputs.JOINED["sorted whole"] == before + 1


def test_a_second_scorings_logits_are_kept_sorting_what_is_new_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model's logits on 5,000 inputs kept, a later scoring's 50 new ones join them by
    a sort of those 50, not of all 5,050 (what a scoring cost at 100,000 kept: ~25 ms),
    and every kept logit is found."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])
    sorted_rows: list[int] = []
    key_order = kept_outputs._key_order

    def counted(keys: kept_outputs.InputKeys) -> np.ndarray:
        sorted_rows.append(len(keys.first))
        return key_order(keys)

    rng = np.random.default_rng(5)
    first = _random_keys(rng, 5_000, 2**62)
    kept_outputs.keep_logits(BUDGET, "d" * 64, None, first, rng.random(5_000, np.float32), "m")
    kept = kept_outputs.kept_logits(BUDGET, "d" * 64)
    assert kept is not None
    monkeypatch.setattr(kept_outputs, "_key_order", counted)
    new = _random_keys(rng, 50, 2**62)
    kept_outputs.keep_logits(BUDGET, "d" * 64, kept, new, rng.random(50, np.float32), "m")
    assert sorted_rows == [50]
    grown = kept_outputs.kept_logits(BUDGET, "d" * 64)
    assert grown is not None and len(grown.first) == 5_050
    both = kept_outputs.InputKeys(
        np.concatenate([first.first, new.first]), np.concatenate([first.second, new.second])
    )
    assert grown.find(both)[0].all()


def test_a_later_scoring_of_the_same_bytes_builds_no_second_model(
    first: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a budget, a scoring of checkpoint bytes an earlier scoring built a model of
    (the model a run serves is the candidate the run before scored) takes that model, its
    copy elsewhere too; with a budget of 0 each scoring builds its own; the same losses."""
    from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor

    built: list[int] = []
    real = WorldModelPredictor.of_state

    def counted(state: Any, path: Path | None = None) -> WorldModelPredictor:
        built.append(1)
        return real(state, path)

    monkeypatch.setattr(WorldModelPredictor, "of_state", counted)
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    served = served_checkpoint(folder)
    kept = scoring.score_records(served, _request(folder, BUDGET))
    copy = tmp_path / "copy"
    copy.mkdir()
    for file in served.parent.glob(served.name + "*"):  # with its digest and summary
        shutil.copy(file, copy / file.name)
    again = scoring.score_records(copy / served.name, _request(folder, BUDGET))
    assert built == [1]
    alone = [scoring.score_records(served, _request(folder, 0)) for _ in range(2)]
    assert built == [1] * 3
    for other in (again, *alone):
        assert other.ids == kept.ids
        assert np.array_equal(other.column("log_loss"), kept.column("log_loss"))


def test_a_kept_key_is_taken_only_under_its_own_stamp() -> None:
    """A last run's key is taken for a row only when that run worked it out (``done``)
    and the row's stamp is the one it had then: a key planted under another stamp, one
    never worked out, or one past the kept rows is left to be hashed again."""
    count = 8
    stamp = np.arange(10, 10 + count, dtype=np.uint64)
    before_stamp = stamp[:6].copy()
    before_stamp[2] = 99  # the row worked out again since: its key is stale
    done = np.array([True, True, True, False, True, True])
    first = np.arange(100, 106, dtype=np.uint64)
    before = kept_outputs.RowKeys(before_stamp, first, first + 50, done, [[], [], [], []])
    keys = kept_outputs.PoolKeys.__new__(kept_outputs.PoolKeys)
    zero = np.zeros(count, np.uint64)
    keys.rows = kept_outputs.RowKeys(stamp, zero, zero.copy(), np.zeros(count, bool), [])
    keys._take(before)
    assert keys.rows.done.tolist() == [True, True, False, False, True, True, False, False]
    assert keys.rows.first.tolist() == [100, 101, 0, 0, 104, 105, 0, 0]
    assert keys.rows.second.tolist() == [150, 151, 0, 0, 154, 155, 0, 0]
    assert keys.reused == 4


@pytest.mark.parametrize("span", [4, 50, 2**62])
def test_keys_asked_by_row_are_found_as_a_search_finds_them(span: int) -> None:
    """Keys asked with their rows (some rows' keys changed since, some rows never given,
    some past every row kept; rows given out of order or twice, repeated and shared first
    halves included) are found, with the same logits, as a search of the same kept keys
    finds them; so after a join too (its rows kept, the new keys searched)."""
    rng = np.random.default_rng(span % 991)
    for k in range(30):
        old = _random_keys(rng, int(rng.integers(1, 300)), span)
        rows = np.sort(rng.choice(400, len(old.first), replace=False))
        given = rows if k % 3 else rng.permutation(rows)
        if k % 5 == 0:  # a row given twice: its first key's
            given = np.concatenate([given[:-1], given[:1]])
        kept = kept_outputs.KeptLogits.of(old, rng.random(len(old.first), np.float32), given)
        rows = given
        new = _random_keys(rng, int(rng.integers(0, 60)), span)
        new = new.take(np.flatnonzero(~kept.find(new)[0]))
        more_rows = 400 + np.arange(len(new.first))
        joined = kept.joined(new, rng.random(len(new.first), np.float32))
        every = np.concatenate([rows, more_rows])
        keys = kept_outputs.InputKeys(
            np.concatenate([old.first, new.first]), np.concatenate([old.second, new.second])
        )
        pick = np.sort(rng.choice(len(every), int(rng.integers(0, len(every) + 1)), replace=False))
        asked, asked_rows = keys.take(pick), every[pick]
        asked.second[rng.random(len(pick)) < 0.2] += np.uint64(1)  # another input at its row
        extra = _random_keys(rng, int(rng.integers(0, 40)), span)
        asked = kept_outputs.InputKeys(
            np.concatenate([asked.first, extra.first]), np.concatenate([asked.second, extra.second])
        )
        asked_rows = np.concatenate([asked_rows, rng.integers(0, 500, len(extra.first))])
        for entry in (kept, joined):
            hit, logit = entry.find(asked, asked_rows)
            want_hit, want_logit = entry.find(asked)  # searched: no rows
            assert hit.tolist() == want_hit.tolist()
            assert logit.tobytes() == want_logit.tobytes()


def test_the_next_scoring_of_the_rows_kept_searches_what_is_new_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model's logits kept on 5,000 rows, a scoring that asks for them by row and for
    50 new rows searches those 50 alone (no sort of the 5,050 asked: ~1.5 ms at 100,000
    records), and finds every kept one; asked without rows, all are searched."""
    searched: list[int] = []
    search = kept_outputs.KeptLogits._search

    def counted(self: kept_outputs.KeptLogits, keys: kept_outputs.InputKeys) -> Any:
        searched.append(len(keys.first))
        return search(self, keys)

    rng = np.random.default_rng(9)
    first = _random_keys(rng, 5_000, 2**62)
    logit = rng.random(5_000, np.float32)
    kept = kept_outputs.KeptLogits.of(first, logit, np.arange(5_000))
    monkeypatch.setattr(kept_outputs.KeptLogits, "_search", counted)
    new = _random_keys(rng, 50, 2**62)
    asked = kept_outputs.InputKeys(
        np.concatenate([first.first, new.first]), np.concatenate([first.second, new.second])
    )
    hit, found = kept.find(asked, np.arange(5_050))
    assert searched == [50]
    assert hit.tolist() == [True] * 5_000 + [False] * 50
    assert found[:5_000].tobytes() == logit.tobytes()
    kept.find(asked)
    assert searched == [50, 5_050]


def test_no_rows_given_finds_by_search_alone() -> None:
    """An entry given no rows (none, or kept before rows were) answers every key asked with
    a row by the search of its keys; a negative row is refused where rows are given."""
    keys = kept_outputs.InputKeys(np.array([5, 9], np.uint64), np.array([1, 7], np.uint64))
    logit = np.array([0.5, 2.0], np.float32)
    for rows in (np.zeros(0, np.int64), None):
        kept = kept_outputs.KeptLogits.of(keys, logit)
        if rows is not None:  # the rows of a first scoring of nothing, joined since
            kept = kept_outputs.KeptLogits.of(keys.take(rows), logit[rows], rows)
            kept = kept.joined(keys, logit)
        hit, found = kept.find(keys, np.array([0, 1]))
        assert hit.tolist() == [True, True] and found.tolist() == [0.5, 2.0]
    with pytest.raises(ValueError, match="0 or more"):
        kept_outputs.KeptLogits.of(keys, logit, np.array([0, -1]))
