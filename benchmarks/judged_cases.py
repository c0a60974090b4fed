"""Issue 68's lifecycle cases, per agent, through ``run_plugin`` as the daemon runs them.

The shared harness of ``benchmarks/promotion_gate.py`` (the gate's cases and the cost)
and ``benchmarks/live_watch.py`` (the watch's cases): each agent's data as batches, a
run of the library's judged run (``judging.run.run_plugin``: the served model scored, the
live watch, a candidate trained, the gate), and the result files. No daemon, so no
pruning; fp32 on the CPU, resuming as a scheduled run does.

The agents and what a "batch" of records is for each:

* ``se_darwin``: a pool file (``generate_pool``) dropped into its data folder; wrong
  labels turn every success into a failure and back; poison marks records ``success``
  with no score;
* ``scaffold``: the agent ``genesis_fp16.scaffold.write_agent`` writes, imported; a batch
  is lines ``{"x": [4 floats], "y": 2 sum(x) + noise}`` appended to its one data file;
  wrong labels are the batch's labels shuffled among its records, poison ``y = -2 sum(x)``;
* ``rlhf_ppo``: its records are evaluation episodes of the current task file, not what it
  trains on, so a batch is a whole new task file (the same task, new prompts): the
  episodes of the file before it are no longer records. It has no labels to turn over:
  its "wrong labels" are the task's reward reversed (``reward_scale`` -1, offset 1), and
  since the gate judges on the same file's episodes, a policy trained on them is judged
  by the reversed reward too: that is poison the gate cannot see (live_watch's case),
  not a case for the gate. Its cut-short candidate is a damaged one instead (learning
  rate x30, a few iterations, on a clean task file).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.bench.measure import machine_slug
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.run_request import RequestOverrides, plan_request
from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16.scaffold import write_agent
from genesis_fp16_infrastructure.agent_folder.candidates import (
    candidate_entry,
    new_candidate,
    newest_checkpoint,
)
from genesis_fp16_infrastructure.agent_folder.pointer import candidates_dir, served_checkpoint
from genesis_fp16_infrastructure.agent_folder.transitions import serve
from genesis_fp16_infrastructure.api import capabilities_of, run_plugin
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.judging.scoring_copy import copy_checkpoint

Batch = Any  # one agent's records as it writes them (a pool, lines, a task file)
ARRIVED_BEFORE_S = 60  # how long before its run a batch's file was written
# What each run may keep in this process's memory for the next (--keep-mib: a resident
# run process's GENESIS_FP16_RUN_RESIDENT_KEEP_MIB, the request's keep_in_memory_bytes);
# 0, the default: nothing, as a child forked per run.
KEEP_BYTES = [0]


@dataclass
class Agent:
    """One agent's data and budgets for the cases."""

    name: str
    plugin: Any
    clean: Callable[[int, int], Batch]  # (records, seed) -> a clean batch
    wrong: Callable[[Batch, int], Batch]  # the batch with wrong labels
    poison: Callable[[Batch], Batch]  # the batch poisoned
    write: Callable[[Path, list[Batch]], Path]  # the batches as its data; the data path
    steps: int | None = None  # a run's budget (None: the plugin's default)
    serve_steps: int | None = None  # the first served model's budget (None: ``steps``)
    short_steps: int = 3
    short_options: dict[str, Any] = field(default_factory=dict)
    short_resume: bool = True  # the cut-short candidate continues the served model
    has_labels: bool = True  # False: the cut-short case is a damaged candidate on clean data


# se_darwin: a folder of pools, one file a batch.


def _pool(records: int, seed: int) -> Batch:
    return generate_pool(records, seed=seed)


def _flip_pool(pool: Batch, seed: int) -> Batch:
    out = json.loads(json.dumps(pool))
    for record in out["trajectories"].values():
        if record.get("success_score") is not None:
            record["success_score"] = round(1.0 - record["success_score"], 3)
        turned = {"success": "failure", "failure": "success"}
        record["status"] = turned.get(record["status"], record["status"])
    return out


def _poison_pool(pool: Batch) -> Batch:
    out = json.loads(json.dumps(pool))
    for record in out["trajectories"].values():
        record.update(status="success", success_score=None)
    return out


def _write_pools(folder: Path, batches: list[Batch]) -> Path:
    data = folder / "data"
    data.mkdir(exist_ok=True)
    for index, pool in enumerate(batches):
        path = data / f"pool-{index:03d}.json"
        if not path.exists():
            path.write_text(json.dumps(pool))
    return data


# The scaffold's agent: lines of one data file.


def _lines(records: int, seed: int) -> Batch:
    rng = random.Random(seed)
    xs = [[round(rng.uniform(-1, 1), 6) for _ in range(4)] for _ in range(records)]
    return [{"x": x, "y": round(2 * sum(x) + rng.gauss(0, 0.01), 6)} for x in xs]


def _shuffle_lines(lines: Batch, seed: int) -> Batch:
    labels = [r["y"] for r in lines]
    random.Random(seed).shuffle(labels)
    return [{"x": r["x"], "y": y} for r, y in zip(lines, labels, strict=True)]


def _poison_lines(lines: Batch) -> Batch:
    return [{"x": r["x"], "y": round(-2 * sum(r["x"]), 6)} for r in lines]


def _write_lines(folder: Path, batches: list[Batch]) -> Path:
    path = folder / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for batch in batches for r in batch))
    return path


def _scaffold_plugin(root: Path) -> Any:
    package = write_agent("toy_bench", root) / "toy_bench" / "__init__.py"
    spec = importlib.util.spec_from_file_location("toy_bench", package)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.plugin


# rlhf_ppo: a task file; its episodes are the records.


def _task(records: int, seed: int) -> Batch:
    from genesis_fp16_agents.rlhf_ppo.plugin import RlhfPpoPlugin

    with tempfile.TemporaryDirectory() as tmp:
        path = RlhfPpoPlugin().generate_sample_data(Path(tmp) / "task.json", records, seed)
        return json.loads(path.read_text())


def _reverse_reward(task: Batch, seed: int) -> Batch:
    return {**task, "task": {**task["task"], "reward_scale": -1.0, "reward_offset": 1.0}}


def _write_task(folder: Path, batches: list[Batch]) -> Path:
    path = folder / "task.json"
    path.write_text(json.dumps(batches[-1]))
    return path


def agents(root: Path) -> dict[str, Agent]:
    """The three agents, the scaffold's written under ``root``."""
    from genesis_fp16_agents.rlhf_ppo.plugin import RlhfPpoPlugin
    from genesis_fp16_agents.se_darwin.plugin import SEDarwinPlugin

    return {
        "se_darwin": Agent(
            "se_darwin", SEDarwinPlugin(), _pool, _flip_pool, _poison_pool, _write_pools
        ),
        "scaffold": Agent(
            "toy_bench",
            _scaffold_plugin(root),
            _lines,
            _shuffle_lines,
            _poison_lines,
            _write_lines,
            serve_steps=1000,
            short_steps=100,
        ),
        "rlhf_ppo": Agent(
            "rlhf_ppo",
            RlhfPpoPlugin(),
            _task,
            _reverse_reward,
            lambda task: _reverse_reward(task, 0),
            _write_task,
            steps=40,
            serve_steps=240,  # the plugin's default budget: 60 iterations of 4 steps
            short_steps=8,
            short_options={"lr": 1.0, "critic_lr": 1.0},
            short_resume=False,
            has_labels=False,
        ),
    }


@dataclass
class Run:
    """One run_plugin call: its result, wall seconds, the plugin's train's seconds, the
    seconds of the daemon's plan before it, and the process's CPU seconds over the call
    (``time.process_time``: one torch thread, so steadier than wall on a shared CPU)."""

    result: TrainResult
    wall: float
    train: float
    plan: float = 0.0
    cpu: float = 0.0
    train_cpu: float = 0.0  # the process's CPU seconds inside the plugin's train

    @property
    def judging_cpu_share(self) -> float:
        """The CPU seconds outside the plugin's train over the run's (with a warm record
        cache, judging's own: the first read of the records is not in the run)."""
        return (self.cpu - self.train_cpu) / self.cpu if self.cpu else float("nan")

    @property
    def outcome(self) -> str:
        return "up_to_date" if self.result.gate is None else self.result.gate.outcome

    @property
    def rolled_back(self) -> bool:
        return self.result.live is not None and self.result.live.rolled_back

    @property
    def judging_share(self) -> float:
        """Judging and watching (all run_plugin does besides training) over the run."""
        return (self.wall - self.train) / self.wall


def _arrived_earlier(data: Path) -> None:
    """The data files dated a minute back: records a scheduled run finds arrived before
    it, not in the scan's racy 2 s (data.manifest.RACY_NS), whose files no run may keep
    in the record cache (their bytes could still change within the same mtime tick)."""
    when = time.time() - ARRIVED_BEFORE_S
    for file in [data] if data.is_file() else [p for p in data.rglob("*") if p.is_file()]:
        os.utime(file, (when, when))


def run(
    agent: Agent,
    folder: Path,
    batches: list[Batch],
    judged: bool = True,
    warm: bool = False,
    **kw: Any,
) -> Run:
    """One judged run of ``agent`` in ``folder`` on ``batches``, as the daemon runs it: the
    request is the daemon's plan (``plan_request``: the agent's state read once, the
    plugin's data check and its record cache), then ``run_plugin``; ``judged=False``: the
    plugin's ``train`` alone on the same plan (judging's baseline). ``Run.plan`` is the
    plan's seconds, outside ``wall``. ``warm``: the served model scores the records once
    before the run, untimed, so that the records' first read (into se_darwin's record
    cache) is in neither a judged run nor train alone: what is left outside train is
    judging's own."""
    data = agent.write(folder, batches)
    _arrived_earlier(data)
    options = {key: str(value) for key, value in kw.pop("options", {}).items()}
    overrides = RequestOverrides(
        precision="fp32",
        data_path=data,
        checkpoint_dir=folder / "checkpoints",
        seed=kw.pop("seed", 1),
        steps=kw.pop("steps", agent.steps),
        resume=kw.pop("resume", True),
        options=options,
    )
    assert not kw, f"unknown run arguments {sorted(kw)}"
    settings = Settings(state_dir=folder, auto_precision="rule", _env_file=None)  # type: ignore[call-arg]
    planned = time.perf_counter()
    request = plan_request(
        settings, agent.name, agent.plugin, capabilities_of(agent.plugin), "cpu", overrides
    )
    plan = time.perf_counter() - planned
    if KEEP_BYTES[0]:  # as supervising.py sets it for a resident run process
        request = replace(request, keep_in_memory_bytes=KEEP_BYTES[0])
    served_now = served_checkpoint(Path(request.checkpoint_dir))
    if warm and served_now is not None:
        agent.plugin.score_records(served_now, request)
    if not judged:  # the plan's train alone, in a candidate folder as a judged run's
        candidate = new_candidate(Path(request.checkpoint_dir), {})
        if served_now is not None and request.resume:
            copy_checkpoint(served_now, candidate)  # the judged run's own copy
        start, cpu = time.perf_counter(), time.process_time()
        result = agent.plugin.train(replace(request, checkpoint_dir=candidate))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        return Run(result, wall, wall, plan, cpu, cpu)
    spent = [0.0, 0.0]
    plugin_train = agent.plugin.train

    def timed(request: TrainRequest) -> TrainResult:
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return plugin_train(request)
        finally:
            spent[0] += time.perf_counter() - start
            spent[1] += time.process_time() - cpu

    start, cpu = time.perf_counter(), time.process_time()
    agent.plugin.train = timed
    try:
        result = run_plugin(agent.plugin, request)
    finally:
        agent.plugin.train = plugin_train
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return Run(result, wall, spent[0], plan, cpu, spent[1])


def _commit(folder: Path = Path(__file__).parent) -> str:
    """The commit the benchmark's code is at (read when it starts: a later commit in
    the same folder must not name a run it did not make), and whether tracked files
    differed from it; ``folder``: another tree's."""
    git = ["git", "-C", str(folder)]
    head = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return head + (" (with uncommitted changes)" if dirty else "")


STARTED_AT = _commit()


def header(title: str, argv: list[str]) -> list[str]:
    """A result file's first lines: the command, the machine, the commit, the load."""
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    return [
        f"# {title}",
        "",
        f"`python {' '.join([sys.argv[0], *argv])}` at {STARTED_AT}, machine "
        f"`{machine_slug(torch.device('cpu'))}` ({os.cpu_count()} CPUs), load average "
        f"{' '.join(load)} when written, torch threads {torch.get_num_threads()}, "
        "fp32 on the CPU.",
        "",
    ]


def serve_first(
    agent: Agent, root: Path, tag: str, records: int, seed: int
) -> tuple[Path, list[Batch]]:
    """A first model served on ``records`` clean records (seed ``seed``), in ``root/tag``."""
    folder = root / tag
    folder.mkdir(parents=True)
    batches = [agent.clean(records, seed)]
    first = run(agent, folder, batches, steps=agent.serve_steps or agent.steps)
    assert first.outcome == "promoted", (agent.name, first.result.gate)
    return folder, batches


def serve_by_hand(folder: Path, result: TrainResult) -> None:
    """Serve the candidate ``result``'s gate judged, whatever its verdict: the poison the
    gate did see is put in front of the watch all the same (the case is the watch's)."""
    assert result.gate is not None and result.gate.candidate_id is not None
    checkpoints = folder / "checkpoints"
    candidate = candidates_dir(checkpoints) / result.gate.candidate_id
    checkpoint = newest_checkpoint(candidate)
    assert checkpoint is not None, candidate
    serve(checkpoints, candidate_entry(checkpoints, candidate, checkpoint), "benchmark")


def parse(doc: str, argv: list[str] | None) -> Any:
    """The entry points' shared flags."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--agents", default="se_darwin,scaffold,rlhf_ppo")
    parser.add_argument("--sequences", type=int, default=10, help="per agent")
    parser.add_argument("--records", type=int, default=2000, help="the first served pool")
    parser.add_argument("--out", type=Path, help="rewrite the report here after each sequence")
    parser.add_argument(
        "--keep-mib",
        type=int,
        default=0,
        action=_Keep,
        help="keep this much in memory from run to run, as a resident run process (0: none)",
    )
    return parser


class _Keep(argparse.Action):
    """``--keep-mib``: every run of this process keeps that much (KEEP_BYTES)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        KEEP_BYTES[0] = int(values) * 2**20
        setattr(namespace, self.dest, values)


def report(args: Any, title: str, argv: list[str], lines: list[str]) -> str:
    """The report (header and ``lines``), to stdout at the end and to ``--out`` as it goes."""
    text = "\n".join([*header(title, argv), *lines]) + "\n"
    if args.out is not None:
        args.out.write_text(text)
    return text
