"""What the event outbox adds to a run: the time of its writes on the transition path.

A transition of the served model (serve, rollback, ...) copies its journal entry into the
agent's outbox before it returns (``Transaction.commit`` ->
``outbox_catch_up.announce_journal``). The copies a kill left undone (the journal's, and
a verdict's: ``outbox_catch_up.announce_verdicts``, one listing of the outbox's
``staged/`` folder) are looked for once per transaction, as
it starts (``agent_folder.transaction``'s settle), and by ``transitions.recover``, which
the daemon calls at its start and after each run (timed where the code under test does
it inside the transition). A rejection
or a hold stages its event before its verdict file and releases it after
(``outbox_catch_up.stage_verdict``, ``release_verdict``, the outbox's lock taken before
them: ``take_lock``); a demotion or a fault bundle writes one
event (``outbox.record``). This script times exactly those calls,
inside real transitions on a real state folder (temp file, fsync, rename, folder fsync:
``atomic.write_atomic``), each transition's calls summed:

- ``promotion``: ``transitions.serve`` of a new candidate (the gate's promotion), with
  the outbox holding ``--backlog`` events already (its listing grows with them: the
  daemon keeps ``GENESIS_FP16_EVENTS_KEEP``, 1000 by default, per agent), and
  ``--candidates`` rejected candidates kept (the daemon's prune keeps them
  ``GENESIS_FP16_REJECTED_KEEP_DAYS``; a catch-up must not cost more with them), plus
  the ``--repeats`` promoted meanwhile;
- ``rejection``: the outbox's calls inside ``candidates.write_verdict`` of a rejected
  candidate (a hold's is the same; a demotion's and a fault bundle's are one
  ``outbox.record``, the same write);
- ``control``: a busy loop as long as the promotion's median, timed the same way: the
  machine's own scheduling noise, which a loaded 2-core machine adds to any p99.

Each row gives wall time and the thread's CPU time (wall minus CPU: waiting for the CPU
or the disk). A call the code under test lacks is not timed (the script runs on earlier
versions too, for a before and after).

Run it with the folder on the disk the daemon's state folder uses (``--dir``; default:
a temp folder). Prints a Markdown table and writes ``--json``::

    python benchmarks/event_outbox.py --repeats 300 --backlog 0 1000 --candidates 0 300 \\
        --json benchmarks/results/event_outbox_cpu-2-cores.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from genesis_fp16_infrastructure.agent_folder import outbox, transitions
from genesis_fp16_infrastructure.agent_folder.candidates import (
    candidate_entry,
    new_candidate,
    write_verdict,
)

try:  # the catch-up has had a module of its own since issue 94; earlier, outbox held it
    from genesis_fp16_infrastructure.agent_folder import outbox_catch_up

    TIMED: tuple[ModuleType, ...] = (outbox, outbox_catch_up)
except ImportError:
    TIMED = (outbox,)

BOUND_MS = 5.0  # issue 60's bound on a run's added time, p99
TRANSITION_CALLS = ("announce_journal", "announce_verdicts")
# Earlier versions' names too (announce_verdict, record), for a before and after.
VERDICT_CALLS = ("take_lock", "stage_verdict", "release_verdict", "announce_verdict", "record")


Timing = tuple[float, float]  # (wall seconds, this thread's CPU seconds)


def _timed(
    calls: list[Timing], function: Callable[..., Any], depth: list[int] | None = None
) -> Callable[..., Any]:
    """``function``, each call's time appended to ``calls``; with ``depth`` (shared by the
    functions timed together) a call inside another timed one is not counted twice."""
    depth = [0] if depth is None else depth

    def timed(*args: Any, **kwargs: Any) -> Any:
        start, cpu = time.perf_counter(), time.thread_time()
        depth[0] += 1
        try:
            return function(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                calls.append((time.perf_counter() - start, time.thread_time() - cpu))

    return timed


def _fill(agent_folder: Path, backlog: int, candidates: int) -> None:
    """``backlog`` events already in the outbox, ``candidates`` rejected ones kept."""
    for n in range(backlog):
        outbox.record(agent_folder, "promote", {"n": n})
    folder = agent_folder / "checkpoints"
    for n in range(candidates):
        candidate = new_candidate(folder, {"fingerprint": f"r{n:07d}", "records": 1})
        write_verdict(candidate, {"outcome": "rejected", "reason": "worse"})


@contextmanager
def _timing(names: tuple[str, ...]) -> Iterator[list[Timing]]:
    """Time each call of the outbox functions ``names`` (those the code has, in the
    outbox's modules: ``TIMED``)."""
    calls: list[Timing] = []
    real = {(m, n): getattr(m, n) for m in TIMED for n in names if hasattr(m, n)}
    depth = [0]
    for (module, name), function in real.items():
        setattr(module, name, _timed(calls, function, depth))
    try:
        yield calls
    finally:
        for (module, name), function in real.items():
            setattr(module, name, function)


def _summed(calls: list[Timing], before: int) -> Timing:
    mine = calls[before:]
    return sum(c[0] for c in mine), sum(c[1] for c in mine)


def time_transitions(root: Path, repeats: int, backlog: int, candidates: int) -> list[Timing]:
    """Each serve's outbox seconds (its catch-ups and its journal entry's copy, summed)."""
    agent_folder = root / "agents" / f"bench_{backlog}_{candidates}"
    folder = agent_folder / "checkpoints"
    _fill(agent_folder, backlog, candidates)
    per_transition = []
    with _timing(TRANSITION_CALLS) as calls:
        for n in range(repeats):
            candidate = new_candidate(folder, {"fingerprint": f"{n:08d}", "records": 1})
            (candidate / "ckpt-0000000001.pt").write_bytes(b"w")
            entry = candidate_entry(folder, candidate, candidate / "ckpt-0000000001.pt")
            before = len(calls)
            transitions.serve(folder, entry, "gate", keep=3, verdict={"outcome": "promoted"})
            per_transition.append(_summed(calls, before))
    return per_transition


def time_rejections(root: Path, repeats: int, backlog: int, candidates: int) -> list[Timing]:
    """Each gate rejection's outbox seconds: the outbox's calls inside a real
    ``candidates.write_verdict`` (whose own verdict file is fsynced between them, not
    counted: the outbox's lock is held meanwhile, which delays only another outbox
    writer)."""
    agent_folder = root / "agents" / f"reject_{backlog}_{candidates}"
    folder = agent_folder / "checkpoints"
    _fill(agent_folder, backlog, candidates)
    found = []
    with _timing(VERDICT_CALLS) as calls:
        for n in range(repeats):
            candidate = new_candidate(folder, {"fingerprint": f"{n:08d}", "records": 1})
            before = len(calls)
            write_verdict(candidate, {"outcome": "rejected", "reason": "worse"})
            found.append(_summed(calls, before))
    return found


def time_control(seconds: float, repeats: int) -> list[Timing]:
    """The machine's own noise: a busy loop of ``seconds`` (the transition's median),
    timed as the writes are. Its p99 above its length is the scheduler's, not ours."""
    found: list[Timing] = []

    def spin() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    timed = _timed(found, spin)
    for _ in range(repeats):
        timed()
        time.sleep(0.001)  # as the transitions leave the CPU between calls
    return found


def _p(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, round(q * (len(sorted_ms) - 1)))]


def summary(timings: list[Timing]) -> dict[str, float]:
    wall = sorted(t[0] * 1000 for t in timings)
    cpu = sorted(t[1] * 1000 for t in timings)
    return {
        "n": len(wall),
        "p50_ms": statistics.median(wall),
        "p99_ms": _p(wall, 0.99),
        "max_ms": wall[-1],
        "cpu_p50_ms": statistics.median(cpu),
        "cpu_p99_ms": _p(cpu, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--backlog", type=int, nargs="+", default=[0, 1000])
    parser.add_argument("--candidates", type=int, nargs="+", default=[0, 300])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for backlog in args.backlog:
            for kept in args.candidates:
                for what, timer in (
                    ("promotion", time_transitions),
                    ("rejection", time_rejections),
                ):
                    figures = summary(timer(Path(tmp), args.repeats, backlog, kept))
                    rows.append({"what": what, "backlog": backlog, "candidates": kept, **figures})
    median = statistics.median(r["p50_ms"] for r in rows if r["what"] == "promotion")
    control = summary(time_control(median / 1000, args.repeats))
    rows.append({"what": "control (busy loop)", "backlog": "-", "candidates": "-", **control})
    _print(rows)
    if args.json is not None:
        load = os.getloadavg()
        record = {
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_1_5_15": load,
            "python": platform.python_version(),
            "rows": rows,
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")


def _print(rows: list[dict[str, Any]]) -> None:
    print(
        "| what | events kept | candidates kept | n | wall p50 ms | wall p99 ms | wall max ms "
        f"| CPU p50 ms | CPU p99 ms | wall p99 <= {BOUND_MS} ms |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ok = "yes" if r["p99_ms"] <= BOUND_MS else "NO"
        print(
            f"| {r['what']} | {r['backlog']} | {r['candidates']} | {r['n']} | {r['p50_ms']:.2f} | "
            f"{r['p99_ms']:.2f} | {r['max_ms']:.2f} | {r['cpu_p50_ms']:.2f} | "
            f"{r['cpu_p99_ms']:.2f} | {ok} |"
        )


if __name__ == "__main__":
    main()
