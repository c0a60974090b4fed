"""What a resident run process keeps in memory from run to run (kept_in_memory): reused only
while its files are the same files, bounded, least recently used evicted and logged."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import CALIBRATION
from genesis_fp16_infrastructure.data.manifest import Manifest, scan_files
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.synthetic import generate_pool, write_replay_buffer
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory, KeptValue
from genesis_fp16_infrastructure.training.precision.kept_measurements import read_calibration
from genesis_fp16_infrastructure.training.reports import Calibration, Measured


def _age(folder: Path) -> None:
    """Files written a minute ago: older than RACY_NS, so kept (as the record cache stores)."""
    for file in folder.iterdir():
        past = file.stat().st_mtime_ns - 60 * 10**9
        os.utime(file, ns=(past, past))


def _pool(tmp_path: Path) -> Path:
    folder = tmp_path / "pool"
    folder.mkdir()
    for name, seed in (("a.json", 1), ("c.json", 3), ("d.json", 4)):
        (folder / name).write_text(json.dumps(generate_pool(120, seed=seed)))
    write_replay_buffer(folder / "b.jsonl", 80, seed=2, agent="qa")
    _age(folder)
    return folder


def _read(
    folder: Path, cache: Path, memory: KeptInMemory | None, previous: Manifest | None = None
) -> tuple[ReadResult, RecordCache, Manifest]:
    manifest, _ = scan_files(folder, previous)
    records = RecordCache(cache, manifest, memory)
    return read_trajectories(folder, cache=records, keep_text=False), records, manifest


def _pool_of(data: ReadResult) -> tuple[object, ...]:
    """Everything a run reads of a pool, comparable."""
    c = data.columns
    return (
        list(c.ids),
        c.score.tobytes(),
        c.own.tobytes(),
        c.labelled.tolist(),
        c.success.tolist(),
        c.label_score.tobytes(),
        c.key.tolist(),
        c.parent.tolist(),
        list(c.outside),
        data.duplicates,
        data.quarantined,
        [e.attempt for e in data.examples],
        data.pool.entries,
    )


def _change(folder: Path) -> None:
    """Between two runs: a same-size edit with the mtime set back, a relabel, an append,
    a deletion."""
    a = folder / "a.json"
    text = a.read_text()
    pool = json.loads(text)
    first = next(iter(pool["trajectories"]))
    edited = text.replace(first, first[:-1] + ("X" if first[-1] != "X" else "Y"), 1)
    assert len(edited) == len(text)
    stat = a.stat()
    a.write_text(edited)
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same size and mtime
    c = folder / "c.json"
    pool = json.loads(c.read_text())
    for record in pool["trajectories"].values():  # relabelled: every success a failure
        if record.get("status") == "success":
            record["status"], record["success_score"] = "failed", 0.0
    c.write_text(json.dumps(pool))
    extra = write_replay_buffer(folder.parent / "more.jsonl", 5, seed=7, agent="qa")
    with (folder / "b.jsonl").open("a") as handle:
        handle.write(extra.read_text())
    (folder / "d.json").unlink()


def test_a_later_read_in_the_process_reuses_only_unchanged_files_and_equals_a_fresh_read(
    tmp_path: Path,
) -> None:
    """Files edited (same size and mtime), relabelled, appended to and deleted between two
    reads in one process: the second read's pool is a fresh read's, record for record; it
    took from memory only what is unchanged. A store that skipped its check (the same
    keys, identity ignored) would serve the old records here."""
    folder = _pool(tmp_path)
    memory = KeptInMemory(64 * 2**20)
    first, _, manifest = _read(folder, tmp_path / "cache", memory)
    assert _pool_of(first) == _pool_of(read_trajectories(folder, keep_text=False))
    _, records, manifest = _read(folder, tmp_path / "cache", memory, manifest)
    assert records.pool_hit and records.from_memory == 4
    _change(folder)
    second, records, _ = _read(folder, tmp_path / "cache", memory, manifest)
    fresh = read_trajectories(folder, keep_text=False)
    assert _pool_of(second) == _pool_of(fresh)
    assert _pool_of(second) != _pool_of(first)
    # a, b and c changed, d gone: nothing of theirs reused, each of the three read
    assert (records.from_memory, records.files_read) == (0, 3)

    class Trusting(KeptInMemory):
        def get(self, key: object, identity: object) -> object:
            entry = self._entries.get(key)
            return None if entry is None else entry.value

    (tmp_path / "two").mkdir()
    folder2 = _pool(tmp_path / "two")
    trusting = Trusting(64 * 2**20)
    _, _, manifest2 = _read(folder2, tmp_path / "cache2", trusting)
    _change(folder2)
    served, _, _ = _read(folder2, tmp_path / "cache2", trusting, manifest2)
    assert _pool_of(served) != _pool_of(read_trajectories(folder2, keep_text=False))


def test_an_unchanged_file_beside_a_new_one_comes_from_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A new file in the pool: the others' records come from memory, only it is read and
    joined onto the kept pool, and the pool is a fresh read's; the read's line says so."""
    folder = _pool(tmp_path)
    memory = KeptInMemory(64 * 2**20)
    _, _, manifest = _read(folder, tmp_path / "cache", memory)
    (folder / "e.json").write_text(json.dumps(generate_pool(30, seed=5)))
    caplog.set_level(logging.INFO)
    data, records, _ = _read(folder, tmp_path / "cache", memory, manifest)
    assert _pool_of(data) == _pool_of(read_trajectories(folder, keep_text=False))
    assert records.from_memory == 4
    said = [r.getMessage() for r in caplog.records if "from memory" in r.getMessage()]
    assert said == [
        f"reused from memory: the joined pool of {len(data.columns) - 30:,} records of 4 "
        f"file(s) unchanged, grown by 1 file(s) (30 records joined) to {len(data.columns):,} "
        "records"
    ]


def test_a_run_writing_into_its_pool_leaves_the_kept_one_alone(tmp_path: Path) -> None:
    """The pool handed out shares the kept one's arrays, read-only: a write into one is
    refused loudly, in the run that kept it and in the next; its ids are a tuple, which
    no run can change, and its lists the run's own."""
    folder = _pool(tmp_path)
    memory = KeptInMemory(64 * 2**20)
    first, _, manifest = _read(folder, tmp_path / "cache", memory)
    expected = _pool_of(first)
    with pytest.raises(ValueError, match="read-only"):
        first.columns.score[:] = -1.0
    with pytest.raises(ValueError, match="read-only"):
        first.columns.agent.codes[0] = 1
    with pytest.raises(TypeError):
        first.columns.ids[0] = "changed"  # type: ignore[index]
    first.columns.outside.append("changed")
    first.columns.agent.values[0] = "changed"
    again, records, _ = _read(folder, tmp_path / "cache", memory, manifest)
    assert records.pool_hit and _pool_of(again) == expected
    with pytest.raises(ValueError, match="read-only"):
        again.columns.own[0, 0] = -1.0
    third, records, _ = _read(folder, tmp_path / "cache", memory, manifest)
    assert records.pool_hit and _pool_of(third) == expected


def test_a_later_read_shares_the_kept_pool_and_copies_no_array(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept pool is handed to a later read of the same files as it is: its arrays
    shared (the same memory, nothing concatenated), read-only."""
    folder = _pool(tmp_path)
    memory = KeptInMemory(64 * 2**20)
    first, _, manifest = _read(folder, tmp_path / "cache", memory)
    calls: list[str] = []
    spied = {"concatenate": np.concatenate}

    def spy(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return spied[name](*args, **kwargs)

        return call

    monkeypatch.setattr(np, "concatenate", spy("concatenate"))
    again, records, _ = _read(folder, tmp_path / "cache", memory, manifest)
    monkeypatch.undo()
    assert records.pool_hit and calls == []
    for name in ("id_hash", "score", "own", "parent", "labelled", "key", "judged"):
        column = getattr(again.columns, name)
        assert np.shares_memory(column, getattr(first.columns, name)), name
        assert not column.flags.writeable, name
    # The ids a tuple: shared, not copied (which no run can change)
    assert again.columns.ids is first.columns.ids and isinstance(again.columns.ids, tuple)
    assert again.columns.outside is not first.columns.outside


def test_the_budget_evicts_the_least_recently_used_first_and_logs_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past its budget the store evicts what was used least recently, one log line each;
    a value larger than the whole budget is not kept."""
    kept = KeptInMemory(250)
    caplog.set_level(logging.INFO, logger=kept_in_memory.__name__)
    kept.put("a", 1, "A", 100, "entry a")
    kept.put("b", 1, "B", 100, "entry b")
    assert kept.get("a", 1) == "A"  # a is now the more recent
    kept.put("c", 1, "C", 100, "entry c")
    assert kept.get("b", 1) is None and kept.get("a", 1) == "A" and kept.get("c", 1) == "C"
    assert kept.evictions == 1 and kept.used == 200
    evicted = [r.getMessage() for r in caplog.records if "evicted" in r.getMessage()]
    assert evicted == ["kept in memory: evicted entry b (0.0 MiB, least recently used; "
                       "0.0 MiB of 0.0 MiB kept)"]  # fmt: skip
    kept.put("d", 1, "D", 1000, "entry d")
    assert kept.get("d", 1) is None and "not kept: over the budget" in caplog.text
    assert kept.get("a", 2) is None and kept.get("a", 1) is None  # another identity: dropped


def _one_run(kept: KeptInMemory, names: str, begun: bool = True) -> list[str]:
    """A run that asks for each of ``names`` in order, making (100 bytes) and keeping
    what it does not find: what it found. ``begun``: it says it begins (begin_run)."""
    if begun:
        kept.begin_run()
    found = []
    for name in names:
        if kept.get(name, 1) is not None:
            found.append(name)
        else:
            kept.put(name, 1, name.upper(), 100, f"entry {name}")
    return found


def test_a_run_larger_than_the_budget_keeps_what_it_used_first_for_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run's entries are not evicted during it: once they fill the budget, what it puts
    next is not kept (logged, counted). The next run of the same reads finds what the
    first kept; least recently used alone would have evicted each entry before it was
    asked for again, and found nothing, run after run."""
    caplog.set_level(logging.INFO, logger=kept_in_memory.__name__)
    kept = KeptInMemory(250)
    assert _one_run(kept, "abcde") == []
    assert kept.declined == 3 and kept.evictions == 0 and kept.used == 200
    declined = [r.getMessage() for r in caplog.records if "not kept: this run" in r.getMessage()]
    assert len(declined) == 3 and declined[0].startswith("kept in memory: entry c (")
    assert _one_run(kept, "abcde") == ["a", "b"]
    assert _one_run(kept, "abcde") == ["a", "b"]
    plain = KeptInMemory(250)  # the same runs, none begun: least recently used alone
    assert [_one_run(plain, "abcde", begun=False) for _ in range(3)] == [[], [], []]
    assert plain.evictions == 13 and plain.declined == 0


def test_a_files_records_joined_into_the_kept_pool_give_way_to_what_the_run_keeps_next(
    tmp_path: Path,
) -> None:
    """Once the joined pool is kept, its files' own records go first when the run keeps
    something else (at a 1,000,000-record pool the default budget declined the encoded
    rows beside both). Without room needed they stay; without them, a later read of the
    same files still takes the pool whole, and one whose file order changed parses."""
    folder = _pool(tmp_path)
    probe = KeptInMemory(64 * 2**20)
    probe.begin_run()
    _read(folder, tmp_path / "probe", probe)
    blocks = sum(e.size for k, e in probe._entries.items() if k[0] == "records")
    assert blocks > 0 and len(probe) == 5  # four files' records and the joined pool
    memory = KeptInMemory(probe.used + blocks // 2)
    memory.begin_run()
    _, _, manifest = _read(folder, tmp_path / "cache", memory)
    assert len(memory) == 5  # room enough: the files' records stay
    room = blocks + blocks // 2  # what is left beside the pool, every block gone
    assert memory.put(("encoded",), 1, b"", room, "the run's encoded rows")
    assert [k[0] for k in memory._entries] == ["pool", "encoded"]
    data, records, _ = _read(folder, tmp_path / "cache", memory, manifest)
    assert records.pool_hit and _pool_of(data) == _pool_of(
        read_trajectories(folder, keep_text=False)
    )
    os.replace(folder / "a.json", folder / "e.json")  # it now sorts after the others
    data, _, _ = _read(folder, tmp_path / "cache", memory, manifest)
    assert _pool_of(data) == _pool_of(read_trajectories(folder, keep_text=False))


def test_a_run_evicts_what_earlier_runs_kept_and_it_did_not_use(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What earlier runs kept and this run has not used goes first, least recently used
    first; a smaller budget (resize) evicts down to it whoever used the entries."""
    caplog.set_level(logging.INFO, logger=kept_in_memory.__name__)
    kept = KeptInMemory(300)
    assert _one_run(kept, "abc") == []
    assert _one_run(kept, "bxy") == ["b"]  # a, then c evicted for x and y; b is this run's
    assert [kept.get(n, 1, given=False) for n in "abcxy"] == [None, "B", None, "X", "Y"]
    assert kept.evictions == 2 and kept.declined == 0
    kept.resize(100)
    assert kept.used == 100 and kept.evictions == 4


def test_the_store_says_what_it_gave_back_once_each_and_starts_again() -> None:
    """take_given lists what lookups took since its last call, in order, once each: a
    hit, not a miss nor a stale entry, nor a lookup that says for itself (given=False)."""
    kept = KeptInMemory(1000)
    kept.put("a", 1, "A", 10, "entry a")
    kept.put("b", 1, "B", 10, "entry b")
    assert kept.get("a", 1) == "A" and kept.get("a", 1) == "A"
    assert kept.get("b", 2) is None and kept.get("x", 1) is None  # stale, never kept
    kept.put("c", 1, "C", 10, "entry c")
    assert kept.get("c", 1, given=False) == "C"
    kept.note_given("c, said by its reader")
    assert kept.take_given() == ["entry a", "c, said by its reader"]
    assert kept.take_given() == []
    assert kept.describe() == "2 entries, 0.0 MiB of 0.0 MiB"


def test_get_each_and_put_each_ask_and_keep_as_get_and_put_do_each() -> None:
    """get_each answers each (key, identity) as get(given=False) does (a stale identity's
    value dropped, nothing said as given); put_each keeps each value as put does (one
    over the budget not kept) and says what its caller took, once."""
    kept = KeptInMemory(100)
    values = [
        KeptValue("a", 1, "A", 10, "entry a"),
        KeptValue("b", 1, "B", 10, "entry b"),
        KeptValue("big", 1, "X", 101, "too big"),
    ]
    kept.put_each(values, ["the a, said by its reader"])
    assert len(kept) == 2  # the one over the budget not kept
    assert kept.get_each([("a", 1), ("b", 2), ("big", 1), ("x", 1)]) == ("A", None, None, None)
    assert len(kept) == 1  # b's stale entry dropped
    assert kept.take_given() == ["the a, said by its reader"]


def test_a_budget_of_zero_keeps_nothing() -> None:
    """A run that keeps nothing (a forked child's, `train`'s) gets no store."""
    assert kept_in_memory.process_memory(0) is None


def test_a_calibration_record_is_reused_while_its_file_is_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With this process's store, a calibration read again while its file is unchanged is
    the kept record (its log says so); a rewritten file is read again; without a store,
    each read is the file's."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])
    path = tmp_path / "precision_calibration.json"
    rows = (Measured("fp32", "eager", 1.0, 0.9, 1.2, 5),)
    files.write_json(path, CALIBRATION, Calibration("fp32", "r", rows, {}, {}, 0.1).cache_json())
    assert read_calibration(path) is not read_calibration(path)  # no store: read each time
    assert kept_in_memory.process_memory(2**20) is not None
    caplog.set_level(logging.INFO)
    first = read_calibration(path)
    assert read_calibration(path) is first
    assert f"reused from memory: calibration {path} (its file unchanged)" in caplog.text
    files.write_json(path, CALIBRATION, Calibration("bf16", "r", rows, {}, {}, 0.1).cache_json())
    changed = read_calibration(path)
    assert changed is not None and changed.chosen == "bf16"


def test_kept_of_digest_keeps_the_last_files_used() -> None:
    """What is made of a file's digest is made once while it is among the last ``keep``
    used (the served model, its predecessor and the candidate), said as given when taken;
    one taken again counts as used then, so the one used longest ago gives way; without a
    store (a budget of 0) it is made every time."""
    made: list[str] = []

    def make(digest: str) -> Callable[[], list[str]]:
        return lambda: made.append(digest) or [digest]  # type: ignore[func-returns-value]

    memory = KeptInMemory(2**20)
    size = kept_in_memory.estimate_bytes
    first = kept_in_memory.kept_of_digest(memory, "model", "a", make("a"), size)
    kept_in_memory.kept_of_digest(memory, "model", "b", make("b"), size)
    kept_in_memory.kept_of_digest(memory, "model", "c", make("c"), size)
    assert kept_in_memory.kept_of_digest(memory, "model", "a", make("a"), size) is first
    assert memory.take_given() == ["model of sha256 a"]
    kept_in_memory.kept_of_digest(memory, "model", "d", make("d"), size)  # c, a and d kept
    kept_in_memory.kept_of_digest(memory, "model", "a", make("a"), size)
    kept_in_memory.kept_of_digest(memory, "model", "b", make("b"), size)  # used first: gone
    assert made == ["a", "b", "c", "d", "b"]
    kept_in_memory.kept_of_digest(None, "model", "c", make("c"), size)
    assert made[-1] == "c" and kept_in_memory.held_of_digest(None, "model", "c") is None


@pytest.mark.parametrize("promoted", ["PPPPPP", "PRRRPRRP", "PRPRRRRRP"])
def test_a_judged_runs_served_model_and_predecessor_are_made_once(promoted: str) -> None:
    """Run after run, each uses the model served, then its predecessor (the live watch),
    then makes its candidate, which the gate promotes (P) or rejects (R): only the
    candidates are ever made, however many are rejected in a row."""
    made: list[str] = []
    memory = KeptInMemory(2**20)

    def use(digest: str) -> None:
        def make() -> list[str]:
            made.append(digest)
            return [digest]

        kept_in_memory.kept_of_digest(memory, "model", digest, make, kept_in_memory.estimate_bytes)

    served: list[str] = []  # the pointer's served model, then its history
    for run, outcome in enumerate(promoted):
        for model in served[:2]:
            use(model)
        use(f"candidate-{run}")
        if outcome == "P":
            served.insert(0, f"candidate-{run}")
    assert made == [f"candidate-{run}" for run in range(len(promoted))]


def test_a_long_list_of_one_shared_object_is_estimated_by_its_pointers() -> None:
    """A column whose every item is the same object (a read without text keeps its text
    columns as one empty string, 990,000 times) is its list's pointers and a share of
    that object; a list of as many distinct strings is still each string's size."""
    count = 100_000
    shared = [""] * count
    distinct = [f"trajectory-{i:07d}" for i in range(count)]
    assert 8 * count <= kept_in_memory.estimate_bytes(shared) < 9 * count
    one = sys.getsizeof(distinct[0])
    assert kept_in_memory.estimate_bytes(distinct) == pytest.approx(count * (8 + one), rel=0.01)
