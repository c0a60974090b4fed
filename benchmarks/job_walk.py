"""A scheduled job's walk through the code: from the scheduler's tick to the first checkpoint.

Issue 40 says a scheduled job "zig-zags": from the tick to the child's first checkpoint
it stops in many files and keeps coming back to the rooms that do not coordinate. This
script measures that walk on the real code, the same way each time::

    python benchmarks/job_walk.py --steps 8 --pool 600 --sequence

It runs ONE real job of the ``se_darwin`` agent in this process, through the daemon's own
job function (``genesis_fp16.jobs.agent_job.run_agent_job``, what ``AgentScheduler`` calls
on each tick), built as ``tests/genesis_fp16/jobs/test_checkpoint_reads.py`` builds it: a
fresh state folder, the run on a watched thread of this process (so the whole walk is in
one process: since issue 91 item 4 the tests' seam ``tests/genesis_fp16/in_process.py``,
which replaces ``execute_run``; in older trees ``run_isolation="thread"``),
``auto_precision="rule"`` (no timing decides anything), ``steps_per_run=STEPS`` and a
generated sample pool of ``POOL`` records (the plugin's ``generate_sample_data``, written
before the trace starts) and, as the daemon passes them, the capabilities its loader read
of the plugin (``capabilities_of``, before the trace; a tree whose job function takes none
is called without). Every other setting is the product's default (``GENESIS_FP16_*``
variables are cleared first). With ``steps_per_run`` of 10 or fewer the first checkpoint
is the one after the first optimizer step (``loop.Cadence``: every tenth of the run's
steps, at least 1).

Before the measured job, one untraced job of the same kind runs in another state folder
(``--cold`` skips it), so that the measured walk is a running daemon's: every module it
needs is imported already, and no module's top-level code counts as a stop.

What is traced (``sys.setprofile``, and ``threading.setprofile`` for the run's thread):
every ``call`` event of a Python frame whose code file is *product code*: a ``.py`` file
under ``genesis_fp16/``, ``agents/`` or ``infrastructure/`` of the tree this script lives
in (none under a ``tests``, ``benchmarks`` or dot folder). The trace starts at the call
of ``run_agent_job`` and ends with the first call of ``CheckpointManager.save``
(``infrastructure/**/training/checkpoint.py``, the function that writes a checkpoint
file), which is the walk's last call. Excluded: the standard library, torch, pydantic,
structlog and every other third-party or C function (a product function called back
from one of them, such as a pydantic validator or a ``functools.partial`` callback, is
traced like any other). Included as calls of their file: comprehensions, lambdas and
nested functions (they are frames of their own in Python 3.11), and the first entry into
a generator's or coroutine's frame; a generator *resumed* (the next item of a ``for``
over it, a ``with`` block's exit) is not a call and is counted apart ("generator
resumptions").

The walk is the list of traced calls in the order they happened (one thread runs product
code at a time: the job's thread waits in ``Thread.join`` while the run's thread trains).
Each call has a *file* (its path in the tree) and a *room*, the file's top folder:
``genesis_fp16`` is the coordinating room, ``agents`` and ``infrastructure`` are the
non-coordinating rooms. With ``c[0] .. c[n-1]`` the walk's calls:

- *calls*: ``n``.
- *stops*: the ``i`` in ``1 .. n-1`` where ``file(c[i]) != file(c[i-1])``.
- *distinct files*: the number of different ``file(c[i])``.
- *room entries*: the ``i`` in ``1 .. n-1`` where ``room(c[i]) != room(c[i-1])``.
- *returns to a non-coordinating room*: the room entries ``i`` whose room is ``agents``
  or ``infrastructure`` and appears among ``room(c[0]) .. room(c[i-1])``: the walk had
  been in that room and left it (the previous call is in another room), and comes back.
  Rooms ``g, a, g, i, g, a`` give 1 (the second ``a``); ``g, i, a, i`` gives 1 too.
  *Returns to the coordinating room* are the same count for ``genesis_fp16``. The
  returns are also split by the thread of the returning call: the job's thread (the
  tick, the plan, ``record_start``, the plugin's up-to-date check) and the run's
  (``plugin.train`` to the checkpoint).
- *contract entries*: the ``i`` where ``c[i]``'s file is one of the plugin contract's
  modules (a file named ``plugin_api.py``, ``train_request.py`` or ``train_result.py``,
  or the path ``contract/reports.py``, where issue 70 put ``TrainResult``: the plugin API
  and the two modules it re-exports) and ``i == 0`` or the previous
  call's file differs; *contract files* is how many of those files the walk entered.
- *file pairs* (``--pairs N``): each stop counted under its two files, unordered; the
  pairs with the most stops are where the walk zig-zags. Listed twice: all stops, and
  the stops that cross rooms (the two files in different rooms).

Each figure is given for two walks. The *full walk* is every traced call: its calls and
stops grow with the pool (the records are read one at a time: about 11 stops a record
in ``infrastructure/**/data/``) and, past 10 steps, with the steps before the first
checkpoint (each step adds 4 returns to a non-coordinating room, 2 into ``agents`` and 2
into ``infrastructure``: the task's batch, the job's ``Run.should_stop``, the loop, the
task's loss, the model); with 10 steps or fewer, its rooms depend on neither. The
*first-call walk* keeps only the calls that are their function's first in the walk (a
function: its file, qualified name and first line), in the same order: the path a reader
follows through the code once, which depends on neither the pool nor the steps.

Issue 53 asks for the walk's files (target: at most 50) and stops, not only its
returns: the report's first line gives the distinct files, the first-call walk's stops
and the full walk's. ``--json`` prints only the figures of both walks, one JSON object.

``--tree TREE`` measures another checkout (the figures are the same for a tree before
9c02862, whose ``runs/`` package and ``plugins.py`` the script also finds): its product
files are TREE's, and TREE's roots must come first on ``PYTHONPATH``, or the script
stops. With the venv of any checkout::

    PYTHONPATH=/work/before:/work/before/agents:/work/before/infrastructure \
        python benchmarks/job_walk.py --tree /work/before --json

``--files`` lists the walk's distinct files in the order it first enters each, with the
calls made in it and how many of its functions were called. ``--returns`` lists each
return to a non-coordinating room (the call's index in the
walk, its thread, the file it came from, and the file and function it entered);
``--sequence`` prints the walk with its repeats folded: the rooms, and each run of
consecutive calls in one file as ``file (calls) first function:line``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import inspect
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

TREE = Path(__file__).resolve().parents[1]
ROOMS = ("genesis_fp16", "agents", "infrastructure")
COORDINATING = "genesis_fp16"
CONTRACT_FILES = ("plugin_api.py", "train_request.py", "train_result.py")
CONTRACT_PATHS = ("/contract/reports.py",)  # TrainResult's module since issue 70
EXCLUDED_FOLDERS = ("tests", "benchmarks", "__pycache__")
FILES_TARGET = 50  # issue 53: tick to first checkpoint through at most 50 files
AGENT = "se_darwin"
# A frame whose code has one of these flags is a generator or coroutine: its later
# "call" events are resumptions (inspect.CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR).
RESUMABLE = 0x20 | 0x80 | 0x200


def room_of(file: str) -> str:
    """The room of a product file: its top folder (``genesis_fp16/jobs/x.py``: genesis_fp16)."""
    return file.split("/", 1)[0]


def product_file(filename: str, tree: Path = TREE) -> str | None:
    """``filename``'s path in ``tree`` when it is product code, else None.

    >>> product_file(str(TREE / "genesis_fp16" / "jobs" / "agent_job.py"))
    'genesis_fp16/jobs/agent_job.py'
    """
    try:
        parts = Path(filename).resolve().relative_to(tree).parts
    except ValueError:
        return None
    if len(parts) < 2 or parts[0] not in ROOMS or not parts[-1].endswith(".py"):
        return None
    if any(p in EXCLUDED_FOLDERS or p.startswith(".") for p in parts[:-1]):
        return None
    return "/".join(parts)


@dataclass(frozen=True)
class WalkCounts:
    """The walk's figures, as defined in the module docstring."""

    calls: int
    stops: int
    files: int
    room_entries: int
    returns_noncoordinating: int
    returns_coordinating: int
    returns_by_room: dict[str, int]
    contract_entries: int
    contract_files: int


def returns(files: Sequence[str]) -> list[int]:
    """The indices of the calls that return to a room: room entries into a room the walk
    had been in before.

    >>> returns(["genesis_fp16/j.py", "agents/p.py", "genesis_fp16/j.py", "agents/p.py"])
    [2, 3]
    """
    rooms = [room_of(f) for f in files]
    seen = set(rooms[:1])
    found = []
    for i in range(1, len(rooms)):
        if rooms[i] != rooms[i - 1] and rooms[i] in seen:
            found.append(i)
        seen.add(rooms[i])
    return found


def _is_contract(file: str) -> bool:
    """Whether ``file`` is one of the plugin contract's modules (by its name, or by its
    path's tail: CONTRACT_PATHS)."""
    return file.rsplit("/", 1)[-1] in CONTRACT_FILES or file.endswith(CONTRACT_PATHS)


def count_walk(files: Sequence[str]) -> WalkCounts:
    """Count a walk given as its calls' files, in call order.

    >>> count_walk(["genesis_fp16/a.py", "agents/b.py", "genesis_fp16/a.py"]).stops
    2
    """
    rooms = [room_of(f) for f in files]
    stops = sum(1 for i in range(1, len(files)) if files[i] != files[i - 1])
    entries = sum(1 for i in range(1, len(rooms)) if rooms[i] != rooms[i - 1])
    by_room = Counter(rooms[i] for i in returns(files))
    contract = [i for i, f in enumerate(files) if _is_contract(f) and (i == 0 or files[i - 1] != f)]
    return WalkCounts(
        calls=len(files),
        stops=stops,
        files=len(set(files)),
        room_entries=entries,
        returns_noncoordinating=sum(n for r, n in by_room.items() if r != COORDINATING),
        returns_coordinating=by_room[COORDINATING],
        returns_by_room={r: by_room[r] for r in ROOMS if r != COORDINATING},
        contract_entries=len(contract),
        contract_files=len({files[i] for i in contract}),
    )


def file_pairs(files: Sequence[str]) -> Counter[tuple[str, str]]:
    """Stops by the two files they join, unordered (the pair sorted by name)."""
    pairs: Counter[tuple[str, str]] = Counter()
    for before, after in pairwise(files):
        if before != after:
            first, second = sorted((before, after))
            pairs[first, second] += 1
    return pairs


def crossing_pairs(files: Sequence[str]) -> Counter[tuple[str, str]]:
    """The file pairs of the stops whose two files are in different rooms."""
    return Counter(
        {pair: n for pair, n in file_pairs(files).items() if room_of(pair[0]) != room_of(pair[1])}
    )


def walk_files(files: Sequence[str], functions: Sequence[str]) -> list[tuple[str, int, int]]:
    """Each distinct file in the order the walk first enters it: (file, its calls, its
    functions called).

    >>> walk_files(["a.py", "b.py", "a.py"], ["f:1", "g:1", "h:5"])
    [('a.py', 2, 2), ('b.py', 1, 1)]
    """
    calls: Counter[str] = Counter(files)
    called: dict[str, set[str]] = {}
    for file, function in zip(files, functions, strict=True):
        called.setdefault(file, set()).add(function)
    return [(file, calls[file], len(called[file])) for file in called]


def fold(items: Sequence[str]) -> list[tuple[str, int, int]]:
    """Runs of equal consecutive items: (item, its count, the index where the run starts).

    >>> fold(["g", "g", "a", "g"])
    [('g', 2, 0), ('a', 1, 2), ('g', 1, 3)]
    """
    runs: list[tuple[str, int, int]] = []
    for i, item in enumerate(items):
        if runs and runs[-1][0] == item:
            runs[-1] = (item, runs[-1][1] + 1, runs[-1][2])
        else:
            runs.append((item, 1, i))
    return runs


@dataclass
class Tracer:
    """The profile function: records product calls until the stop code's first call."""

    stop_code: CodeType
    tree: Path = TREE
    files: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)  # each call's thread, by name
    resumptions: int = 0
    stopped: bool = False
    _known: dict[str, str | None] = field(default_factory=dict)
    # Generator frames already entered, kept alive so that no id is reused.
    _entered: set[FrameType] = field(default_factory=set)

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or self.stopped:
            return
        code = frame.f_code
        filename = code.co_filename
        if filename not in self._known:
            self._known[filename] = product_file(filename, self.tree)
        file = self._known[filename]
        if file is None:
            return
        if code.co_flags & RESUMABLE:
            if frame in self._entered:
                self.resumptions += 1
                return
            self._entered.add(frame)
        self.files.append(file)
        self.functions.append(f"{code.co_qualname}:{code.co_firstlineno}")
        self.threads.append(threading.current_thread().name)
        if code is self.stop_code:
            self.stopped = True
            sys.setprofile(None)  # this thread's; the job's thread is unhooked after the job

    def trace(self, call: Callable[[], object]) -> None:
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        try:
            call()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            self._entered.clear()


@dataclass(frozen=True)
class Job:
    """What one traced job ran on."""

    steps: int
    pool: int
    device: str
    seconds: float


def _from_tree(tree: Path, attr: str, *modules: str) -> Any:
    """``attr`` of the first of ``modules`` that is a file of ``tree``: 9c02862 moved
    ``genesis_fp16/runs/`` into ``jobs/`` and ``launch/``, and ``plugins.py`` into
    ``config/``, and the script measures trees from either side of it. A module found
    elsewhere (an editable install's finder answers for a name the tree lacks) is not
    imported: it would bring a second copy of the contract's classes."""
    for name in modules:
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            continue
        if spec is not None and spec.origin and product_file(spec.origin, tree):
            return getattr(importlib.import_module(name), attr)
    raise SystemExit(f"job_walk: none of {', '.join(modules)} is a file of {tree}")


def _load_plugin(tree: Path, name: str) -> Any:
    modules = ("genesis_fp16.config.plugins", "genesis_fp16.plugins")
    found = _from_tree(tree, "load_plugin", *modules)(name)
    return getattr(found, "plugin", found)  # since trim93: the plugin and its capabilities


def _job(folder: Path, data: Path, steps: int, tree: Path) -> tuple[Callable[[], None], Any, str]:
    """The daemon's job function for one fresh state folder, its metrics registry and
    the device the job trains on."""
    from prometheus_client import CollectorRegistry

    from genesis_fp16.config.settings import Settings, resolve_device
    from genesis_fp16.metrics.daemon_metrics import DaemonMetrics

    jobs = ("genesis_fp16.jobs.agent_job", "genesis_fp16.runs.jobs")
    device_slots, job_context = (_from_tree(tree, n, *jobs) for n in ("DeviceSlots", "JobContext"))
    run_agent_job = _from_tree(tree, "run_agent_job", *jobs)

    seam = tree / "tests" / "genesis_fp16" / "in_process.py"
    if seam.is_file():  # the run on a thread of this process: the tests' seam
        spec = importlib.util.spec_from_file_location("job_walk_in_process", seam)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        importlib.import_module(jobs[0]).execute_run = module.execute_in_process
    settings = Settings(
        state_dir=folder,
        run_isolation="thread",  # an older tree's; ignored where the setting is gone
        steps_per_run=steps,
        auto_precision="rule",
        agents={AGENT: {"data_path": str(data)}},  # type: ignore[dict-item]
    )
    metrics = DaemonMetrics(CollectorRegistry(), "job_walk")
    ctx = job_context(settings, metrics, device_slots(1), threading.Event())
    plugin = _load_plugin(tree, AGENT)
    job = functools.partial(run_agent_job, ctx, AGENT, plugin)
    if "capabilities" in inspect.signature(run_agent_job).parameters:
        # What the daemon passes: the capabilities its loader read, before any job.
        api = ("genesis_fp16_infrastructure.contract.plugin_api",)
        job = functools.partial(job, _from_tree(tree, "capabilities_of", *api)(plugin))
    return job, metrics.registry, resolve_device(settings.agent(AGENT).device)


def _succeeded(registry: Any) -> bool:
    labels = {"agent": AGENT, "outcome": "success"}
    return bool(registry.get_sample_value("genesis_fp16_training_runs_total", labels) == 1)


def trace_job(steps: int, pool: int, warm: bool = True, tree: Path = TREE) -> tuple[Tracer, Job]:
    """Run one se_darwin job through ``run_agent_job`` and trace its walk (see above)."""
    import genesis_fp16
    from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager

    if product_file(genesis_fp16.__file__, tree) is None:
        raise SystemExit(
            f"job_walk: genesis_fp16 is imported from {genesis_fp16.__file__}, "
            f"not from {tree}: put the tree's roots on PYTHONPATH"
        )
    for key in [k for k in os.environ if k.startswith("GENESIS_FP16_")]:
        del os.environ[key]
    tracer = Tracer(CheckpointManager.save.__code__, tree)
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        data = _load_plugin(tree, AGENT).generate_sample_data(folder / "data", pool, 0)
        if warm:
            run, registry, _ = _job(folder / "warm-up", data, steps, tree)
            run()
            if not _succeeded(registry):
                raise SystemExit("job_walk: the warm-up job did not succeed")
        run, registry, device = _job(folder / "state", data, steps, tree)
        started = time.perf_counter()
        tracer.trace(run)
        seconds = time.perf_counter() - started
        if not tracer.stopped:
            raise SystemExit("job_walk: the job wrote no checkpoint (CheckpointManager.save)")
        if not _succeeded(registry):
            raise SystemExit("job_walk: the traced job did not succeed")
    return tracer, Job(steps, pool, device, seconds)


def first_calls(files: Sequence[str], functions: Sequence[str]) -> list[str]:
    """The files of the calls that are their function's first (a function: its file,
    qualified name and first line), in call order.

    >>> first_calls(["a.py", "b.py", "a.py"], ["f:1", "g:1", "f:1"])
    ['a.py', 'b.py']
    """
    seen: set[tuple[str, str]] = set()
    kept = []
    for file, function in zip(files, functions, strict=True):
        if (file, function) not in seen:
            seen.add((file, function))
            kept.append(file)
    return kept


def table(full: WalkCounts, first: WalkCounts, tracer: Tracer) -> Iterator[str]:
    """The figures of both walks as a Markdown table."""
    rows: list[tuple[str, Callable[[WalkCounts], object]]] = [
        (f"**distinct files** (target <= {FILES_TARGET})", lambda c: f"**{c.files}**"),
        ("**stops** (file changes between consecutive calls)", lambda c: f"**{c.stops}**"),
        ("calls (product code)", lambda c: c.calls),
        ("room entries", lambda c: c.room_entries),
        ("**returns to a non-coordinating room**", lambda c: f"**{c.returns_noncoordinating}**"),
        *(
            (f"- of which into {room}/", lambda c, room=room: c.returns_by_room[room])
            for room in ROOMS
            if room != COORDINATING
        ),
        ("returns to the coordinating room (genesis_fp16/)", lambda c: c.returns_coordinating),
        (
            "contract entries (plugin_api, train_request, train_result)",
            lambda c: c.contract_entries,
        ),
        ("contract files entered", lambda c: c.contract_files),
    ]
    yield "| figure | full walk | first-call walk |"
    yield "| --- | ---: | ---: |"
    for name, value in rows:
        yield f"| {name} | {value(full)} | {value(first)} |"
    yield f"| generator resumptions (not calls) | {tracer.resumptions} | |"
    noncoordinating = [i for i in returns(tracer.files) if room_of(tracer.files[i]) != COORDINATING]
    for thread in dict.fromkeys(tracer.threads):
        n = sum(1 for i in noncoordinating if tracer.threads[i] == thread)
        calls = tracer.threads.count(thread)
        yield f"| returns to a non-coordinating room on thread {thread!r} ({calls} calls) | {n} | |"


def listed_returns(tracer: Tracer) -> Iterator[str]:
    """Each return to a non-coordinating room as a Markdown row, in walk order."""
    files = tracer.files
    for i in returns(files):
        if room_of(files[i]) != COORDINATING:
            function = tracer.functions[i]
            yield f"| {i} | {tracer.threads[i]} | {files[i - 1]} | {files[i]} ({function}) |"


def sequence(tracer: Tracer) -> Iterator[str]:
    """The walk folded: its rooms, then its runs of calls in one file."""
    rooms = fold([room_of(f) for f in tracer.files])
    yield "rooms: " + " ".join(f"{r}x{n}" if n > 1 else r for r, n, _ in rooms)
    yield ""
    for file, n, start in fold(tracer.files):
        yield f"{file} ({n}) {tracer.functions[start]}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="steps_per_run (default 8)")
    parser.add_argument("--pool", type=int, default=600, help="sample records (default 600)")
    parser.add_argument("--cold", action="store_true", help="no warm-up job first")
    parser.add_argument("--pairs", type=int, default=10, help="file pairs to list (default 10)")
    parser.add_argument("--sequence", action="store_true", help="print the folded walk")
    parser.add_argument(
        "--returns", action="store_true", help="list the returns to a non-coordinating room"
    )
    parser.add_argument(
        "--tree",
        type=Path,
        default=TREE,
        help="the tree whose files are product code (default: this script's); its roots "
        "must come first on PYTHONPATH",
    )
    parser.add_argument(
        "--json", action="store_true", help="print only the figures of both walks, as JSON"
    )
    parser.add_argument(
        "--files", action="store_true", help="list the walk's files, in the order entered"
    )
    args = parser.parse_args(argv)
    import structlog

    # The jobs' log lines go to stderr (structlog's default is stdout): stdout is the report.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    tree = args.tree.resolve()
    tracer, job = trace_job(args.steps, args.pool, warm=not args.cold, tree=tree)
    full = count_walk(tracer.files)
    first = count_walk(first_calls(tracer.files, tracer.functions))
    print(f"job_walk: the traced job took {job.seconds:.1f} s", file=sys.stderr)
    if args.json:
        figures = {"full": asdict(full), "first_call": asdict(first), "seconds": job.seconds}
        print(json.dumps({"tree": str(tree), **figures}))
        return
    print(
        f"se_darwin, steps_per_run={job.steps}, pool={job.pool}, device={job.device}, "
        f"{'cold' if args.cold else 'warm'}, tree {tree}\n"
    )
    print(
        f"Tick to first checkpoint: {full.files} files (target <= {FILES_TARGET}), "
        f"{first.stops} first-call stops ({full.stops} in the full walk), "
        f"{full.returns_noncoordinating} returns to a non-coordinating room.\n"
    )
    print("\n".join(table(full, first, tracer)))
    for title, pairs in (
        ("file pair (all stops)", file_pairs(tracer.files)),
        ("file pair (stops that cross rooms)", crossing_pairs(tracer.files)),
    ):
        if args.pairs:
            print(f"\n| {title} | stops |\n| --- | ---: |")
            for (one, other), n in pairs.most_common(args.pairs):
                print(f"| {one} <-> {other} | {n} |")
    if args.files:
        print("\n| # | file (in the order the walk enters it) | calls | functions |")
        print("| ---: | --- | ---: | ---: |")
        for i, (file, calls, called) in enumerate(walk_files(tracer.files, tracer.functions)):
            print(f"| {i + 1} | {file} | {calls} | {called} |")
    if args.returns:
        print("\n| call | thread | from | into (function) |\n| ---: | --- | --- | --- |")
        print("\n".join(listed_returns(tracer)))
    if args.sequence:
        print("\n```")
        print("\n".join(sequence(tracer)))
        print("```")


if __name__ == "__main__":
    main()
