"""How long the status page takes for 50 agents with full history (issue 60 part 7:
at most 100 ms on a 2-core CPU).

    python benchmarks/status_page.py [--agents 50] [--repeats 40] [--out FILE] > results.md

Builds a state folder with the product's own writers: per agent, ``AgentFolder.save_run``'s
two writes for as many runs as the history keeps (``run_history.KEEP``; each with a
gate verdict, the live watch's figures, every tenth a demotion, every seventh a drift
warning), a served pointer whose journal is full (``transitions.serve`` with the gate's
verdict for each promotion, ``transitions.rollback`` every fifth) and a quarantine folder
of 20 files.
Then times what one request for ``/`` does on the daemon's page thread (the daemon part
and the schedule are given: they are a dictionary copy in the daemon):
``gather_status`` (every file read, bounded) plus ``render_html`` (rows, runs tables, 150
SVG charts), and each alone; ``/status.json``'s ``json.dumps`` too. Median and p90 of
``--repeats`` requests after two warm-up ones, one thread, wall clock.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import msgspec
import torch

from genesis_fp16.plugin_api import TrainResult
from genesis_fp16.status import history, render
from genesis_fp16.status.render import render_html
from genesis_fp16.status.report import DaemonStatus, NextRun, gather_status
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedEntry
from genesis_fp16_infrastructure.agent_folder.run_history import KEEP
from genesis_fp16_infrastructure.agent_folder.transitions import JOURNAL_KEEP, rollback, serve
from genesis_fp16_infrastructure.api import GateReport, LiveReport, ScoresOn
from genesis_fp16_infrastructure.contract.reports import DriftReport, LiveFigures
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.training.reports import Demotion

BOUND_MS = 100.0
DAEMON = DaemonStatus(True, os.getpid(), "serve", time.time() - 3600, 3600.0, True, "ok", "ready")


def _scores(auc: float, log_loss: float) -> ScoresOn:
    """se_darwin's figures on its held-out set: two gated columns, AUC beside them."""
    losses = {"log_loss": log_loss, "brier": log_loss / 3}
    return ScoresOn("held_out", losses, 2000, {"auc": auc}, "log_loss")


def _result(agent: str, run: int) -> TrainResult:
    """A plausible se_darwin run: a gate verdict, live figures, now and then a demotion
    and a drift warning."""
    outcome = "promoted" if run % 3 == 0 else "rejected"
    gate = GateReport(
        outcome,  # type: ignore[arg-type]
        f"candidate c{run} against c{run - 1} on 2000 records",
        candidate=_scores(0.80 + run * 0.001, 0.45),
        served=_scores(0.79 + run * 0.001, 0.46),
        served_id=f"c{run - 1}",
        candidate_id=f"c{run}",
    )
    figures = LiveFigures(400 + run, -0.01, -0.03, 0.01, 0.02, 0.025, False, 0.45, 0.46)
    live = LiveReport(
        f"c{run - 1}", f"c{run - 2}", 400 + run, 40, 0.05, False, primary="log_loss",
        metrics={"log_loss": figures, "brier": replace(figures, served_loss=0.15)},
    )  # fmt: skip
    drift = DriftReport(
        40, 2000, {}, {"reward": 0.3}, {"reward": 0.2}, ("reward",), 0.0, 0.1, False
    )
    return TrainResult(
        agent=agent,
        precision_requested="auto",
        precision_used="bf16",
        precision_reason="auto measured bf16 fastest: bf16 35.2 ms (spread 3%), fp32 41.0 ms",
        device="cpu",
        steps=240,
        skipped_steps=run % 4,
        overflow_rate=0.0,
        loss_scale=2.0 ** (10 + run % 6),
        final_train_loss=0.4,
        eval={"loss": 0.4, "auc": 0.8},
        samples_per_second=1000.0,
        wall_seconds=30.0,
        checkpoint=None,
        quarantined=run % 5,
        demotions=(Demotion("fp16", "bf16", "overflow_rate", 40, 30),) if run % 10 == 0 else (),
        gate=gate,
        drift=drift if run % 7 == 0 else None,
        live=live,
    )


def _seed_agent(state: Path, agent: str) -> None:
    agent_folder = AgentFolder(state, agent)
    agent_folder.root.mkdir(parents=True)
    for run in range(KEEP):
        result = _result(agent, run)
        when = time.time() - (KEEP - run) * 3600  # hourly runs, the last an hour ago
        agent_folder.save_run(result.history_entry(30.0, "daemon", when=when))
    folder = agent_folder.checkpoint_dir
    for index in range(JOURNAL_KEEP + 4):
        candidate = folder / "candidates" / f"c{index}"
        candidate.mkdir(parents=True)
        (candidate / "ckpt-0000000240.pt").write_bytes(b"")
        entry = ServedEntry(
            id=f"c{index}",
            checkpoint=f"candidates/c{index}/ckpt-0000000240.pt",
            precision="bf16",
            scores=_scores(0.8, 0.45),
        )
        verdict = {"outcome": "promoted", "reason": "no worse than the served model " * 8}
        serve(folder, entry, "gate", keep=5, verdict=verdict)
        if index % 5 == 4:
            rollback(folder, verdict={"reason": "live_regression"})
    agent_folder.quarantine_dir.mkdir()
    for index in range(20):
        (agent_folder.quarantine_dir / f"20261125T{index:06d}.000000Z.jsonl").write_text("{}\n")


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(0.9 * (len(ordered) - 1))] * 1e3


def measure(agents: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Median and p90 milliseconds of a page request and of its parts: cold (every
    history read and drawn: what a request after each agent's run costs) and again with
    nothing changed (the histories and drawings kept from the request before)."""
    names = [f"agent{index:02d}" for index in range(agents)]
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        for name in names:
            _seed_agent(state, name)
        timings: dict[str, list[float]] = {}
        for index in range(repeats + 2):
            history._CACHE.clear()  # cold: as if every agent had run since the last request
            render._DRAWN.clear()
            cold = _request(state, names)
            warm = _request(state, names)
            if index < 2:
                continue  # warm-up: imports, the page cache of the files
            for name, value in [*cold.items(), *((f"{k} again", v) for k, v in warm.items())]:
                timings.setdefault(name, []).append(value)
    return {name: _ms(samples) for name, samples in timings.items()}


def _request(state: Path, names: list[str]) -> dict[str, float]:
    """One request's seconds: the page (wall and CPU), its parts, /status.json."""

    def schedule(agent: str) -> NextRun:
        return NextRun(time.time() + 600, "every 3600 s")

    cpu = time.process_time()
    start = time.perf_counter()
    report = gather_status(state, names, DAEMON, schedule)
    gathered = time.perf_counter()
    page = render_html(report)
    rendered = time.perf_counter()
    cpu = time.process_time() - cpu
    msgspec.json.encode(report)  # what serving.py's /status.json sends
    dumped = time.perf_counter()
    assert page.count(b'<svg class="chart"') == 3 * len(names)
    return {
        "page": rendered - start,
        "page_cpu": cpu,
        "gather": gathered - start,
        "render": rendered - gathered,
        "json": dumped - rendered,
    }


def report(
    agents: int, repeats: int, figures: dict[str, tuple[float, float]], load: tuple[str, str]
) -> str:
    wall, cpu_time = figures["page"][1], figures["page_cpu"][1]  # cold: the bound's case
    verdicts = ["met" if value <= BOUND_MS else "missed" for value in (wall, cpu_time)]
    cpu = platform.processor() or platform.machine()
    lines = [
        f"# Status page: {agents} agents with full history",
        "",
        f"`python benchmarks/status_page.py --agents {agents} --repeats {repeats}`; "
        f"{os.cpu_count()} CPUs ({cpu}), torch {torch.__version__}, Python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"Each agent: {KEEP} runs in its history, a full journal, 20 quarantine files.",
        f"Load average (1 min) before and after: {load[0]}, {load[1]}: the machine is shared,",
        "so wall times carry other processes' time; the CPU time is this request's own.",
        "",
        "| what | median ms | p90 ms |",
        "| --- | --- | --- |",
    ]
    names = {
        "page": "one request for `/`: gather + render (wall)",
        "page_cpu": "one request for `/`: gather + render (CPU time)",
        "gather": "gather_status (state files read)",
        "render": "render_html (rows, tables, SVG)",
        "json": "`/status.json`'s encoding",
    }
    for key, (median, p90) in figures.items():
        base, again = key.removesuffix(" again"), key.endswith(" again")
        what = names[base] + (", again, nothing changed" if again else ", cold")
        lines.append(f"| {what} | {median:.1f} | {p90:.1f} |")
    lines += [
        "",
        f"Bound: a cold page in <= {BOUND_MS:.0f} ms (p90): wall {verdicts[0]}, "
        f"CPU time {verdicts[1]}.",
        "",
    ]
    return "\n".join(lines)


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    before = _load()
    figures = measure(args.agents, args.repeats)
    text = report(args.agents, args.repeats, figures, (before, _load()))
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
