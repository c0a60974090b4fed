"""The fixed cost of one process-isolated run: from spawning the child to its first step.

Spawns the daemon's own child command (``genesis-fp16 train se_darwin --request FILE --json
--json-progress``, genesis_fp16/launch/launcher.py) for a few-step run resumed from the previous
run's checkpoint, and times, from the spawn, the child's first log record (its imports,
settings and plugin done: "set-up"), its first progress line (data, model and checkpoint
loaded, one step taken: "first step"), its exit, and the CPU seconds it used (user and
system, from wait4: a busy shared machine slows them far less than the wall clock). With
several ``--tree`` folders (a checkout each, e.g. ``git archive`` of two commits) the runs
interleave tree by tree, so load on the machine falls on both alike; each phase is printed
as median and quartiles, with the ratio of medians and the median paired (same round)
difference against the first tree::

    python benchmarks/child_start.py --runs 15 --tree /tmp/base --tree /tmp/after
    python benchmarks/child_start.py --imports --runs 31 --tree /tmp/base --tree /tmp/after

``--imports`` times only what a child imports before it trains, in CPU seconds: the entry
in each tree, and torch and torch._dynamo in a bare interpreter.

The request is fp32 (no calibration: that is a one-off per agent, cached in its state),
and the child runs with the daemon's environment otherwise (no thread limits).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from genesis_fp16.config.plugins import load_plugin
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.run_request import RequestOverrides, plan_request
from genesis_fp16.launch.handoff import write_run_file
from genesis_fp16.launch.launcher import child_command, request_file
from genesis_fp16.plugin_api import TrainRequest

PHASES = ("set_up_s", "first_step_s", "exit_s", "cpu_s")


def _request(state: Path, steps: int, sample_count: int) -> TrainRequest:
    settings = Settings(state_dir=state, sample_count=sample_count)
    overrides = RequestOverrides(precision="fp32", steps=steps, log_interval=1)
    request = plan_request(settings, "se_darwin", *load_plugin("se_darwin"), "cpu", overrides)
    request = getattr(request, "request", request)  # a tree before trim24: its RunPlan
    request = replace(request, checkpoint_steps=10**6)  # one checkpoint, at the end
    path = request_file(request)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The run file of this tree (genesis_fp16/launch/handoff.py); a tree before 481ea09 reads a
    # bare request (json.dumps(request.to_json())) instead.
    write_run_file(path, request, "INFO")
    return request


def _time_child(tree: Path, request: TrainRequest) -> dict[str, float]:
    """Seconds from the spawn to the child's first log record, first step and exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env |= {"PYTHONPATH": str(tree), "GENESIS_FP16_LOG_FORMAT": "json"}
    command = child_command(request)
    started = time.perf_counter()
    # stdin: the pipe a child watches for its daemon's end, held open as the daemon does.
    child = subprocess.Popen(
        command,
        cwd=tree,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    marks: dict[str, float] = {}

    def first_log() -> None:
        assert child.stderr is not None
        for _ in child.stderr:
            marks.setdefault("set_up_s", time.perf_counter() - started)

    reader = threading.Thread(target=first_log, daemon=True)
    reader.start()
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith('{"progress"'):
            marks.setdefault("first_step_s", time.perf_counter() - started)
    # wait4, not wait: the child's own CPU seconds, which other tenants of a shared
    # machine slow far less than they slow its wall clock.
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = code = os.waitstatus_to_exitcode(status)
    marks["exit_s"] = time.perf_counter() - started
    marks["cpu_s"] = usage.ru_utime + usage.ru_stime
    reader.join()
    if code != 0 or set(marks) != set(PHASES):
        raise SystemExit(f"child_start: the child in {tree} exited {code} ({marks})")
    return marks


def _summary(runs: list[dict[str, float]], first: list[dict[str, float]]) -> dict[str, Any]:
    """Median and quartiles per phase; against the first tree, the ratio of medians and the
    median of the paired (same round) differences."""
    out: dict[str, Any] = {"runs": len(runs)}
    for phase in PHASES:
        values = [r[phase] for r in runs]
        q1, _, q3 = statistics.quantiles(values, n=4)
        paired = [r[phase] - f[phase] for r, f in zip(runs, first, strict=True)]
        base = statistics.median(f[phase] for f in first)
        out[phase] = {
            "median": round(statistics.median(values), 3),
            "q1": round(q1, 3),
            "q3": round(q3, 3),
            "ratio": round(statistics.median(values) / base, 3),
            "paired_diff_median": round(statistics.median(paired), 3),
        }
    return out


def _cpu_seconds(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"child_start: {' '.join(command)} failed in {cwd}")
    return usage.ru_utime + usage.ru_stime


def _imports(trees: list[Path], runs: int) -> dict[str, Any]:
    """CPU seconds of what every child imports before training, interleaved: the entry
    (``genesis-fp16 train --help``: interpreter, settings, the command) in each tree, and
    torch, then torch with torch._dynamo (torch.optim imports it at the first optimizer)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    python = [sys.executable, "-c"]
    probes: dict[str, tuple[list[str], Path, dict[str, str]]] = {
        f"entry {tree}": ([sys.executable, "-m", "genesis_fp16", "train", "--help"], tree, env)
        for tree in trees
    }
    for code in ("pass", "import torch", "import torch, torch._dynamo"):
        probes[code] = ([*python, code], trees[0], env)
    seconds: dict[str, list[float]] = {name: [] for name in probes}
    for _ in range(runs):
        for name, (command, cwd, base_env) in probes.items():
            seconds[name].append(_cpu_seconds(command, cwd, {**base_env, "PYTHONPATH": str(cwd)}))
    first = seconds[f"entry {trees[0]}"]
    out = {}
    for name, values in seconds.items():
        q1, _, q3 = statistics.quantiles(values, n=4)
        row: dict[str, float] = {"cpu_ms_median": round(statistics.median(values) * 1e3)}
        row["q1"] = round(q1 * 1e3)
        row["q3"] = round(q3 * 1e3)
        if name.startswith("entry"):
            paired = statistics.median(v - f for v, f in zip(values, first, strict=True))
            row["paired_diff_ms_median"] = round(paired * 1e3, 1)
        out[name] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per tree, interleaved")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sample-count", type=int, default=2000)
    parser.add_argument("--tree", type=Path, action="append", help="checkout (default: .)")
    parser.add_argument(
        "--imports", action="store_true", help="only the CPU seconds of the imports, no run"
    )
    args = parser.parse_args()
    trees = [t.resolve() for t in (args.tree or [Path(".")])]
    if args.imports:
        print(json.dumps({"imports": _imports(trees, args.runs)}, indent=2))
        return
    times: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory() as folder:
        requests = {}
        for i, tree in enumerate(trees):
            requests[tree] = _request(Path(folder) / str(i), args.steps, args.sample_count)
            _time_child(tree, requests[tree])  # warm-up: sample data, first checkpoint
        for _ in range(args.runs):
            for tree in trees:
                times[tree].append(_time_child(tree, requests[tree]))
    report = {str(tree): _summary(times[tree], times[trees[0]]) for tree in trees}
    print(json.dumps({"python": sys.version.split()[0], "trees": report}, indent=2))


if __name__ == "__main__":
    main()
