"""A read shared with helper processes (``data.read_workers``) is the read without them:
the same column blocks byte for byte, the same quarantined entries in the same order,
whether the helpers read every unit, refuse some (records to quarantine), end before
they answer or hang; and helpers end with the process that started them."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from genesis_fp16_infrastructure.data import (
    batch_decode,
    file_blocks,
    helper_messages,
    read_workers,
    readers,
    shared_read,
    sources,
)
from genesis_fp16_infrastructure.data.manifest import RACY_NS, scan_files
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.synthetic import generate_pool


@pytest.fixture(autouse=True)
def _small_units(monkeypatch: pytest.MonkeyPatch) -> None:
    """Units of a few dozen records, blocks of a few KB: a small file shares."""
    monkeypatch.setattr(read_workers, "MIN_UNIT_RECORDS", 40)
    monkeypatch.setattr(file_blocks, "BATCH_RECORDS", 32)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 160_000)  # ~100 lines: two units each
    yield
    read_workers.close()


def _write(folder: Path, layout: str, bad: bool) -> Path:
    pool = generate_pool(400, seed=7)
    items = list(pool["trajectories"].items())
    if bad:  # one hostile entry early, one late: two units refused
        items[30:30] = [("bad-1", {"status": "success", "success_score": 3})]
        items[350:350] = [("bad-2", [1, 2])]
    folder.mkdir(parents=True, exist_ok=True)
    if layout == "jsonl":
        lines = [json.dumps(r) for _, r in items]
        if bad:
            lines[200:200] = ["{not json"]
        path = folder / "pool.jsonl"
        path.write_text("\n".join(lines) + "\n")
        return path
    path = folder / "pool.json"
    path.write_text(json.dumps({**pool, "trajectories": dict(items)}))
    return path


def _read(path: Path, workers: int, keep_text: bool) -> tuple[bytes, list[str]]:
    quarantine = path.parent / f"q-{workers}-{keep_text}.jsonl"
    sink = QuarantineSink(quarantine)
    try:
        block = readers._file_records(path, sink, None, keep_text, workers)
    finally:
        sink.close()
    lines = quarantine.read_text().splitlines() if quarantine.exists() else []
    return msgspec.msgpack.encode(block), lines


@pytest.mark.parametrize("layout", ["json", "jsonl", "streamed"])
@pytest.mark.parametrize("bad", [False, True])
def test_a_read_shared_with_helpers_is_the_read_without_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, bad: bool
) -> None:
    """The same blocks, byte for byte, and the same quarantined entries in order; a pool
    large enough to be split a window at a time ("streamed": its runs of records) too."""
    if layout == "streamed":
        monkeypatch.setattr(sources, "STREAM_ABOVE", 0)
    path = _write(tmp_path, "json" if layout == "streamed" else layout, bad)
    read_workers.UNITS.clear()
    for keep_text in (False, True):
        alone = _read(path, 0, keep_text)
        shared = _read(path, 2, keep_text)
        assert shared == alone
        assert len(alone[1]) == (3 if bad and layout == "jsonl" else 2 if bad else 0)
    assert not read_workers.FAILED
    assert read_workers.UNITS["helper"] > 0 and read_workers.UNITS["reader"] > 0


def test_a_whole_read_with_helpers_reads_the_same_pool(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``read_trajectories(workers=...)``, the run's read: the same columns and counts;
    its log line says how many units its helpers parsed (a read alone's says nothing)."""
    path = _write(tmp_path / "data", "jsonl", True)
    with caplog.at_level("INFO", logger=readers.__name__):
        alone = readers.read_trajectories(path.parent, tmp_path / "q0.jsonl", workers=0)
        assert "units shared" not in caplog.text
        shared = readers.read_trajectories(path.parent, tmp_path / "q2.jsonl", workers=2)
    said = re.search(r"units shared: (\d+) parsed by 2 read helper\(s\), (\d+) here", caplog.text)
    assert said is not None and int(said[1]) > 0
    assert (shared.quarantined, shared.labelled) == (alone.quarantined, alone.labelled)
    assert shared.columns.key.tolist() == alone.columns.key.tolist()
    assert shared.columns.ids == alone.columns.ids
    assert (tmp_path / "q2.jsonl").read_text() == (tmp_path / "q0.jsonl").read_text()


# A helper that answers every unit it is sent with the same msgpack ``reply``
_ANSWERING = """
import sys
source, sink = sys.stdin.buffer, sys.stdout.buffer
while head := source.read(8):
    source.read(int.from_bytes(head, "little"))
    sink.write(len({reply!r}).to_bytes(8, "little") + {reply!r})
    sink.flush()
"""


@pytest.mark.parametrize(
    ("helper", "why"),
    [
        ("import os; os._exit(3)", "ended before it answered"),
        ("import time; time.sleep(60)", "ran past its deadline"),
        ("import sys; sys.stdout.buffer.write(bytes(8) + b'x'); sys.stdin.read()", "answered"),
        # A text that is no UTF-8 (msgspec says so with a UnicodeDecodeError)
        (_ANSWERING.format(reply=b"\xa1\xff"), "answered what is no column blocks"),
        # Well-formed blocks, but not of the unit asked: none of its records
        (_ANSWERING.format(reply=b"\x90"), "answered 0 records"),
    ],
)
def test_a_helper_that_fails_leaves_its_records_to_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helper: str, why: str
) -> None:
    """A helper that ends, hangs or answers nonsense (bytes that are no blocks, or blocks
    that are not the unit's records) is stopped and counted; the reader reads its units
    itself: the same block, nothing lost."""
    path = _write(tmp_path, "json", False)
    alone = _read(path, 0, False)
    monkeypatch.setattr(read_workers, "HELPER", [sys.executable, "-c", helper])
    monkeypatch.setattr(read_workers, "DEADLINE_SECONDS", 1.0)
    monkeypatch.setattr(read_workers, "DEADLINE_FACTOR", 1.0)
    read_workers.FAILED.clear()
    helpers = read_workers.workers(1)
    assert helpers is not None
    assert _read(path, 1, False) == alone
    assert any(why in reason for reason in read_workers.FAILED)
    assert all(proc.poll() is not None for proc in helpers.procs)  # stopped, and reaped
    assert read_workers.workers(1) is not helpers  # the next read starts afresh
    read_workers.FAILED.clear()


# A helper (helper_messages.serve, as read_workers runs it) with a no-op handler for the
# signals its reader sends it while it answers
_SIGNALLED = """
import signal, sys
from genesis_fp16_infrastructure.data import helper_messages
signal.signal(signal.SIGUSR1, lambda *_: None)
helper_messages.serve(sys.stdin.buffer, sys.stdout.buffer)
"""


def test_a_helper_signalled_as_it_answers_answers_whole() -> None:
    """A helper's answers written under signals: each write of an answer into a full
    pipe is interrupted again and again (a handler runs each time, as a run's do for
    SIGTERM), yet every answer arrives whole and in step, the blocks this process makes
    of the unit, with its standard streams unbuffered (``PYTHONUNBUFFERED=1``). (Written
    through ``sys.stdout.buffer``, then a raw file whose write may take part of its bytes,
    a helper's answers lost bytes this way, and every later answer was out of step.)"""
    records = generate_pool(800, seed=7)["trajectories"]
    raws = [json.dumps(record).encode() for record in records.values()]
    run = sources.RawRun(Path("p.json"), raws, list(records), (0.7, 0.3))
    unit = shared_read._unit(run, keep_text=True)
    expected = msgspec.msgpack.encode(batch_decode.unit_blocks(unit))
    assert len(expected) > 4 * 2**16  # an answer fills the pipe many times over
    helper = subprocess.Popen(
        [sys.executable, "-c", _SIGNALLED],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert helper.stdin is not None and helper.stdout is not None
    answers, done = helper.stdout.fileno(), threading.Event()

    def pester() -> None:
        while not done.is_set() and helper.poll() is None:
            helper.send_signal(signal.SIGUSR1)
            time.sleep(0.0005)

    try:
        helper_messages.send_unit(helper.stdin.fileno(), unit)
        first = helper_messages.read_reply(answers, time.monotonic() + 30)  # handler set
        assert msgspec.msgpack.encode(first) == expected
        threading.Thread(target=pester, daemon=True).start()
        for _ in range(12):
            helper_messages.send_unit(helper.stdin.fileno(), unit)
            time.sleep(0.05)  # its answer waits in a full pipe, signalled meanwhile
            reply = helper_messages.read_reply(answers, time.monotonic() + 30)
            assert not isinstance(reply, helper_messages.Failed), reply.why
            assert msgspec.msgpack.encode(reply) == expected
    finally:
        done.set()
        helper.kill()
        helper.wait()
        helper.stdin.close()
        helper.stdout.close()


def test_helpers_end_with_the_process_that_started_them(tmp_path: Path) -> None:
    """The reading process killed (-9): each helper reads the end of its stdin and exits."""
    script = (
        "import os, signal\n"
        "from genesis_fp16_infrastructure.data import read_workers\n"
        "helpers = read_workers.workers(2)\n"
        "print(' '.join(str(p.pid) for p in helpers.procs), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = _python(script)
    assert done.returncode == -signal.SIGKILL
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 60
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(pid) for pid in pids)


def _python(script: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by a Python of its own, its output captured."""
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped by init, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_read_too_small_to_share_starts_no_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of fewer than two units is parsed alone, and starts nothing."""
    path = _write(tmp_path, "json", False)
    read_workers.close()
    monkeypatch.setattr(read_workers, "MIN_UNIT_RECORDS", 10_000)
    _read(path, 2, False)
    assert not read_workers._KEPT


def test_a_helper_holds_no_descriptor_of_the_run(tmp_path: Path) -> None:
    """A resident run process's stdout and stderr are its current run's, whose end the
    daemon hears when they close: a helper kept for the next runs holds neither (its
    stderr is /dev/null; its stdin and stdout are its own pipes)."""
    helpers = read_workers.workers(1)
    assert helpers is not None
    (proc,) = helpers.procs
    assert os.readlink(f"/proc/{proc.pid}/fd/2") == "/dev/null"
    ours = {
        os.readlink(f"/proc/self/fd/{fd}") for fd in (1, 2) if os.path.exists(f"/proc/self/fd/{fd}")
    }
    theirs = {os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in (0, 1)}
    assert not ours & theirs


def test_a_forked_child_never_uses_its_parent_s_helpers(tmp_path: Path) -> None:
    """A process forked from one with helpers starts its own: the parent's pipes are
    never written from two processes."""
    path = _write(tmp_path, "json", False)
    alone = _read(path, 0, False)
    helpers = read_workers.workers(1)
    assert helpers is not None
    out = tmp_path / "child.bin"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's lines run in the child
        code = 1
        try:
            mine = read_workers.workers(1)
            block, lines = _read(path, 1, False)
            ok = mine is not helpers and mine is not None and mine.owner == os.getpid()
            out.write_bytes(block if ok and not lines else b"")
            read_workers.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert out.read_bytes() == alone[0]
    assert helpers.alive() and read_workers.workers(1) is helpers


def test_helpers_outlive_a_resident_run_s_end() -> None:
    """A resident run process runs the atexit functions a run registered at that run's
    end (commands/resident.py): the helpers a run started stay for the next runs."""
    script = (
        "import atexit\n"
        "from genesis_fp16_infrastructure.data import read_workers\n"
        "helpers = read_workers.workers(1)\n"
        "atexit._run_exitfuncs()\n"
        "assert helpers.alive() and read_workers.workers(1) is helpers\n"
        "read_workers.close()\n"
        "print('kept')\n"
    )
    done = _python(script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "kept"


def test_helpers_start_for_a_file_to_parse_and_never_for_one_the_cache_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read about to parse START_BYTES or more of a file starts the helpers; the same
    file again, its records in the record cache, is not parsed and starts none."""
    path = _write(tmp_path / "data", "json", False)
    time.sleep(RACY_NS / 1e9 + 0.1)  # the file older than the manifest's racy window
    manifest, _ = scan_files(path.parent)
    cache = RecordCache(tmp_path / "cache", manifest)
    monkeypatch.setattr(read_workers, "START_BYTES", path.stat().st_size)
    read_workers.close()
    readers.read_trajectories(path.parent, tmp_path / "q.jsonl", cache=cache, workers=1)
    assert read_workers._KEPT  # started, and used: the file is several units
    read_workers.close()
    again = RecordCache(tmp_path / "cache", manifest)
    readers.read_trajectories(path.parent, tmp_path / "q.jsonl", cache=again, workers=1)
    assert not read_workers._KEPT


def test_a_read_asked_for_no_helpers_stops_those_kept_from_an_earlier_setting(
    tmp_path: Path,
) -> None:
    """READ_WORKERS set to 0 since the last run: the next read that parses a file stops
    the helpers the resident process kept (not left idle, holding memory)."""
    path = _write(tmp_path, "json", False)
    helpers = read_workers.workers(2)
    assert helpers is not None
    assert _read(path, 0, False) == _read(path, 0, False)
    assert not read_workers._KEPT
    assert all(proc.poll() is not None for proc in helpers.procs)


def test_a_unit_a_helper_raises_on_is_said_counted_and_read_here(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A unit the helper's decoding raises on (a block whose line ends are not int64s)
    comes back as the exception's line: logged, counted, left to the reader (None); the
    helper is not stopped, and reads the next unit."""
    records = generate_pool(3, seed=7)["trajectories"]
    raws = [json.dumps(record).encode() for record in records.values()]
    run = sources.RawRun(Path("p.json"), raws, list(records), (0.7, 0.3))
    good = shared_read._unit(run, keep_text=False)
    bad = msgspec.structs.replace(good, raws=[], keys=None, block=b"{}\n", ends=b"abc")
    read_workers.FAILED.clear()
    helpers = read_workers.workers(1)
    assert helpers is not None
    with caplog.at_level("WARNING", logger=read_workers.__name__):
        # The helper is given the first unit; this process reads the second, and the
        # third goes to whichever is done first.
        replies = list(read_workers._Round(helpers.procs, [bad, good, good]).run())
    assert replies[0] is None
    assert replies[1] is not None and replies[1] == replies[2]  # its next unit, read
    assert read_workers.FAILED == {"raised ValueError": 1}
    assert "raised ValueError" in caplog.text
    assert helpers.alive() and read_workers.workers(1) is helpers  # not stopped
    read_workers.FAILED.clear()


def test_a_round_of_two_units_gives_one_to_each_process() -> None:
    """One helper, two units: the helper parses one and this process the other (both
    were given to the helper ahead, and this process waited for it)."""
    records = generate_pool(3, seed=7)["trajectories"]
    raws = [json.dumps(record).encode() for record in records.values()]
    unit = shared_read._unit(sources.RawRun(Path("p.json"), raws, list(records), (0.7, 0.3)), False)
    helpers = read_workers.workers(1)
    assert helpers is not None
    read_workers.UNITS.clear()
    replies = list(helpers.read([unit, unit]))
    assert replies[0] is not None and replies[0] == replies[1]
    assert read_workers.UNITS == {"helper": 1, "reader": 1}


def test_a_stream_s_units_are_taken_as_they_come_and_held_no_more_than_a_round() -> None:
    """A round takes its units as the split makes them: its first answer comes before
    the last unit is taken (the helpers start while the file is still split), and at no
    time are more than ``held_at_once`` units taken and not yet given back."""
    records = generate_pool(3, seed=7)["trajectories"]
    raws = [json.dumps(record).encode() for record in records.values()]
    unit = shared_read._unit(sources.RawRun(Path("p.json"), raws, list(records), (0.7, 0.3)), False)
    helpers = read_workers.workers(1)
    assert helpers is not None
    count, most, taken = 40, read_workers.held_at_once(1), []

    def units() -> Iterator[batch_decode.Unit]:
        for index in range(count):
            taken.append(index)
            yield unit

    given_back = 0
    for reply in helpers.read(units()):
        assert reply is not None
        assert len(taken) - given_back <= most
        assert given_back or len(taken) < count  # the first before the last is taken
        given_back += 1
    assert given_back == count


def test_a_jsonl_s_last_block_is_shared_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every unit of a ``.jsonl`` read with a helper is shared, its last block's too:
    rounds of ``held_at_once`` units had left a last block of one unit to the reader
    alone, the helper idle."""
    monkeypatch.setattr(read_workers, "MIN_UNIT_RECORDS", 30)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 125_000)  # ~85 lines: two or three units
    path = _write(tmp_path, "jsonl", False)
    runs = list(sources.split_records(path, QuarantineSink(None), 0, 1))
    units = len(list(shared_read.runs_from(runs[0], iter(runs[1:]), 1, [])))
    assert units > read_workers.held_at_once(1)  # more than one round's
    read_workers.UNITS.clear()
    assert _read(path, 1, False) == _read(path, 0, False)
    assert sum(read_workers.UNITS.values()) == units


def _units(path: Path, workers: int) -> list[sources.RawRun]:
    """The units a read of ``path`` with ``workers`` helpers shares, in file order."""
    runs = list(sources.split_records(path, QuarantineSink(None), 0, 1))
    assert all(isinstance(run, sources.RawRun) for run in runs)
    return list(shared_read.runs_from(runs[0], iter(runs[1:]), workers, []))


def _lines(unit: sources.RawRun) -> list[bytes]:
    assert unit.block is not None
    return [line for line in unit.block.split(b"\n") if line]


def test_a_shared_file_s_last_units_are_cut_finer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file shared with helpers ends in smaller units (its last two, or a ``.jsonl``'s
    last block's last, each cut in two), the rest as before; every record in file
    order, once; a ``.jsonl`` of blocks of one unit each is shared, its last block cut too.
    A file of one unit is not cut, so no helper shares it."""
    doc = _units(_write(tmp_path / "doc", "json", False), 1)  # 8 units of 50 (fixture: 40)
    assert [len(unit) for unit in doc] == [50] * 6 + [25] * 4
    assert [unit.first for unit in doc] == list(
        itertools.accumulate([0] + [len(u) for u in doc[:-1]])
    )
    assert [len(unit) for unit in _units(tmp_path / "doc" / "pool.json", 0)] == [400]
    monkeypatch.setattr(read_workers, "MIN_UNIT_RECORDS", 300)  # one unit of 400
    assert [len(unit) for unit in _units(tmp_path / "doc" / "pool.json", 1)] == [400]
    monkeypatch.setattr(read_workers, "MIN_UNIT_RECORDS", 30)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 125_000)  # ~85 lines: two or three units
    path = _write(tmp_path / "lines", "jsonl", False)
    blocks = list(sources.split_records(path, QuarantineSink(None), 0, 1))
    whole = [len(shared_read._parts(block, 1)) for block in blocks]
    lines = _units(path, 1)
    assert len(lines) == sum(whole) + 1  # the last block's last unit, in two
    every = [line for line in path.read_bytes().split(b"\n") if line]
    assert [line for unit in lines for line in _lines(unit)] == every
    tail = _lines(shared_read._parts(blocks[-1], 1)[-1])
    halves = [_lines(lines[-2]), _lines(lines[-1])]
    assert halves[0] + halves[1] == tail and all(len(h) <= len(tail) // 2 + 1 for h in halves)
    monkeypatch.setattr(read_workers, "MIN_UNIT_RECORDS", 300)  # each block one unit
    single = [len(shared_read._parts(block, 1)) for block in blocks]
    assert single == [1] * len(blocks) and len(blocks) > 1
    lines = _units(path, 1)
    assert len(lines) == len(blocks) + 1  # still shared: the last block cut in two
    assert [line for unit in lines for line in _lines(unit)] == every


def test_a_round_left_midway_stops_the_helpers_it_gave_units(tmp_path: Path) -> None:
    """A read that stops taking answers midway (an error where they are joined) stops
    each helper still holding a unit, and keeps one that holds none: no later read takes
    an answer meant for this one; the next read reads the same blocks as a read alone."""
    path = _write(tmp_path, "json", False)
    records = generate_pool(3, seed=7)["trajectories"]
    raws = [json.dumps(record).encode() for record in records.values()]
    unit = shared_read._unit(sources.RawRun(Path("p.json"), raws, list(records), (0.7, 0.3)), False)
    helpers = read_workers.workers(1)
    assert helpers is not None
    shared = read_workers._Round(helpers.procs, [unit] * 40)
    replies = shared.run()
    assert next(replies) is not None
    holding = bool(shared.given)  # mostly: a helper has its next the moment it answers
    replies.close()  # left, answers still owed or not
    assert helpers.alive() is not holding
    assert (read_workers.workers(1) is helpers) is not holding  # stopped: started afresh
    assert _read(path, 1, False) == _read(path, 0, False)
