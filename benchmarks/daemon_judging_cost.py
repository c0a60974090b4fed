"""Judging's cost on the product path: a real daemon's judged runs, as its own phases say.

Issue 68 asks that judging and watching cost at most 5% of a run. ``promotion_gate.py
--cost N`` measures it inside one warm process around ``run_plugin``; this measures it
where users see it. For each agent and pool size N it starts ``genesis-fp16 serve`` (fp32
by ``ENABLE_FP16_TRAINING=false``, the agent alone, scheduled daily and not at start:
every run is one asked for by ``genesis-fp16 run``), with data written by ``genesis-fp16
data generate``:

- se_darwin: a first model served on a pool of N // 2 records (seed 99), a second run
  after N // 4 more (seed 2099), then the measured run after the rest (seed 3099): a
  folder of pools, each file dated a minute back as a scheduled run finds them;
- rlhf_ppo: the same sizes and seeds as task files, each replacing the one before (its
  records are the current file's evaluation episodes).

The measured run is repeated ``--repeats`` times from a copy of the state before it, a
daemon started for each. Each row reads the daemon's own ``training run finished`` log
line: the run's phases (``TrainResult.phases``: se_darwin's check, read, encode, train,
eval, drift; every judged run's ``live``, the served model scored and watched, and
``gate``, the candidate scored and judged), the run's own wall seconds and the job's
duration (its child forked, the run, its result recorded). Each measured daemon is
fresh, so its run starts the run worker (a long-running daemon does that once): those
seconds are taken out of the job. Judging's share is live and gate over the run's
seconds, and over the job's. Each run checks that the exported
``genesis_fp16_run_phase_seconds`` says what the log says (what Grafana shows). Wall
seconds; the daemon and its runs at one torch thread (``OMP_NUM_THREADS=1``)::

    python benchmarks/daemon_judging_cost.py --agents se_darwin --records 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from judged_cases import header
from run_now_latency import _ready, _wait

PORT = 19533
ENV = {
    "ENABLE_FP16_TRAINING": "false",
    "GENESIS_FP16_SCHEDULE": "86400",
    "GENESIS_FP16_RUN_AT_START": "false",
    "GENESIS_FP16_LOG_FORMAT": "json",
    "GENESIS_FP16_METRICS_PORT": str(PORT),
    "OMP_NUM_THREADS": "1",
}
SEEDS = (99, 2099, 3099)  # the three batches, as promotion_gate.py's cost case
ARRIVED_BEFORE_S = 60


def _cli(env: dict[str, str], *args: str) -> str:
    command = [sys.executable, "-m", "genesis_fp16", *args]
    return subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout


def _batch(agent: str, folder: Path, env: dict[str, str], count: int, seed: int) -> None:
    """One batch of ``agent``'s records into ``folder/data`` (se_darwin: one more pool
    file; rlhf_ppo: the task file replaced), written by ``data generate``."""
    out = folder / f"generated-{seed}"
    written = Path(_cli(env, "data", "generate", agent, "--out", str(out), "--count",
                        str(count), "--seed", str(seed)).strip().splitlines()[-1])  # fmt: skip
    data = folder / "data"
    data.mkdir(exist_ok=True)
    target = data / (f"pool-{seed}.json" if agent == "se_darwin" else "task.json")
    shutil.move(written, target)
    shutil.rmtree(out)
    when = time.time() - ARRIVED_BEFORE_S
    os.utime(target, (when, when))


def _finished(log: Path, agent: str) -> list[dict[str, Any]]:
    """The daemon log's ``training run finished`` records of ``agent``, each with
    ``worker_start``: the seconds from its job's start to ``run worker ready`` when the
    job started the run worker (a daemon's first run does; later ones fork from it)."""
    found, started, ready = [], None, None
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        when = datetime.fromisoformat(record.get("timestamp", "1970-01-01")).timestamp()
        event = str(record.get("event"))
        if event == "training run started" and record.get("agent") == agent:
            started, ready = when, None
        elif event.startswith("run worker ready") and started is not None:
            ready = when
        elif event == "training run finished" and record.get("agent") == agent:
            found.append({**record, "worker_start": 0.0 if ready is None else ready - started})
    return found


def _ended(log: Path, agent: str, before: int) -> bool:
    """Whether more than ``before`` runs of ``agent`` finished; a failed run raises, its
    error said (rather than a wait for a line that will not come)."""
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if '"training run failed"' in line:  # the whole line: a half-written one waits
            with contextlib.suppress(ValueError):
                error = json.loads(line).get("error")
                raise SystemExit(f"{agent}'s run failed: {error} ({log})")
    return len(_finished(log, agent)) > before


def _gauge(agent: str, port: str) -> dict[str, float]:
    """The exported ``genesis_fp16_run_phase_seconds`` of ``agent``, by phase."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    prefix = f'genesis_fp16_run_phase_seconds{{agent="{agent}",phase="'
    return {
        line[len(prefix) :].split('"')[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def _runs(
    agent: str,
    folder: Path,
    env: dict[str, str],
    count: int,
    before: Callable[[int], None] | None = None,
    after: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """A daemon on ``folder/state``, asked for ``count`` runs of ``agent`` one after the
    other (the data as it stands, or as ``before(n)`` leaves it before the n-th); their
    finished records. ``after(pid)``, given the daemon's process id, is called after the
    last run, while the daemon and its processes still live. The daemon is then stopped.
    Its metrics port is ``env``'s (``GENESIS_FP16_METRICS_PORT``)."""
    log, port = folder / "daemon.log", env["GENESIS_FP16_METRICS_PORT"]
    log.unlink(missing_ok=True)
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "genesis_fp16", "serve"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait(lambda: _ready(f"http://127.0.0.1:{port}/readyz"), "the daemon to be ready", 120)
        for done in range(count):
            if before is not None:
                before(done)
            _cli(env, "run", agent)
            _wait(lambda n=done: _ended(log, agent, n), f"{agent}'s run", 600)
        finished = _finished(log, agent)
        if finished[-1].get("phases"):
            assert _gauge(agent, port) == finished[-1]["phases"], (
                "the gauge is not the run's phases"
            )
        if after is not None:
            after(daemon.pid)
        return finished
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)


def _env(agent: str, folder: Path) -> dict[str, str]:
    """This process's environment without its daemon settings, then ``ENV``: a daemon of
    ``agent`` alone, its state in ``folder/state``, its data in ``folder/data``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GENESIS_FP16_", "ENABLE_"))}
    env.update(ENV)
    upper = agent.upper()
    env.update(
        {
            "GENESIS_FP16_STATE_DIR": str(folder / "state"),
            "GENESIS_FP16_PLUGIN_ALLOWLIST": agent,
            f"GENESIS_FP16_AGENTS__{upper}__DATA_PATH": str(
                folder / "data" / ("" if agent == "se_darwin" else "task.json")
            ),
        }
    )
    return env


def _row(agent: str, records: int, repeats: int, root: Path) -> str:
    folder = root / f"{agent}-{records}"
    folder.mkdir()
    env = _env(agent, folder)
    sizes = (records // 2, records // 4, records - records // 2 - records // 4)
    _batch(agent, folder, env, sizes[0], SEEDS[0])
    (first,) = _runs(agent, folder, env, 1)
    _batch(agent, folder, env, sizes[1], SEEDS[1])
    (second,) = _runs(agent, folder, env, 1)
    _batch(agent, folder, env, sizes[2], SEEDS[2])
    shutil.copytree(folder / "state", folder / "before")
    measured = []
    for _ in range(repeats):
        shutil.rmtree(folder / "state")
        shutil.copytree(folder / "before", folder / "state")
        measured.append(_runs(agent, folder, env, 1)[0])
    shares, of_job, judging, runs, jobs = [], [], [], [], []
    for record in measured:
        phases = record.get("phases") or {}
        spent = phases.get("live", 0.0) + phases.get("gate", 0.0)
        run = record["wall_seconds"]
        job = record["duration_seconds"] - record["worker_start"]
        shares.append(100 * spent / run)
        of_job.append(100 * spent / job)
        judging.append(spent)
        runs.append(run)
        jobs.append(job)
    names = sorted({name for r in measured for name in r.get("phases") or {}})
    each = ", ".join(
        f"{name} {statistics.median((r.get('phases') or {}).get(name, 0.0) for r in measured):.3f}"
        for name in names
    )
    outcomes = sorted({(r.get("gate") or {}).get("outcome", r.get("outcome")) for r in measured})
    before = [(r.get("gate") or {}).get("outcome") for r in (first, second)]
    return (
        f"| {agent} | {records:,} | {', '.join(map(str, before))} | {', '.join(outcomes)} | "
        f"{_med(runs, 's')} | {_med(jobs, 's')} | {_med(judging, 's', 3)} | "
        f"**{_med(shares, '%', 1)}** | {_med(of_job, '%', 1)} | {each} |"
    )


def _med(values: list[float], unit: str, digits: int = 2) -> str:
    mid, low, high = statistics.median(values), min(values), max(values)
    space = " " if unit == "s" else ""
    return f"{mid:.{digits}f}{space}{unit} ({low:.{digits}f}-{high:.{digits}f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="se_darwin,rlhf_ppo")
    parser.add_argument("--records", default="2000", help="pool sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="measured runs per row")
    parser.add_argument("--out", type=Path, help="write the table here too")
    args = parser.parse_args(argv)
    lines = [
        *header("Judging's cost in a real daemon's runs", sys.argv[1:] if argv is None else argv),
        "The daemon and its runs at one torch thread (`OMP_NUM_THREADS=1`; the line above "
        "is this script's own process). Medians (range) of the measured runs. Judging: the "
        "run's live and gate phases; run: its wall seconds; job: the daemon's duration of "
        "the job (its child forked, the run, its result recorded), less the run worker's "
        "start.",
        "",
        "| agent | records | first, second run | measured runs | run | job | judging | "
        "judging's share of the run | of the job | the run's phases, median seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory(prefix="judging-cost-") as name:
        for agent in args.agents.split(","):
            for records in (int(n) for n in args.records.split(",")):
                lines.append(_row(agent, records, args.repeats, Path(name)))
                print(lines[-1], flush=True)
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
