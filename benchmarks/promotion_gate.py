"""Does the judged run's gate reject candidates cut short on wrong labels, promote clean
growth, and at what cost? Issue 68's gate cases on each agent, through ``run_plugin``.

    python benchmarks/promotion_gate.py [--agents se_darwin,scaffold,rlhf_ppo]
        [--sequences 10] [--records 2000] [--cost 2000] [--pair FILE] [--out FILE]

For each agent and sequence s (``benchmarks/judged_cases.py`` says what an agent's
batch, wrong labels and budget are): a first model served on ``records`` clean records
(seed s), then, each from a copy of that folder:

* **cut short on wrong labels**: ``records`` fresh records with wrong labels appended,
  the candidate trained for the agent's short budget (se_darwin 3 steps, afresh as its
  recipe trains; the scaffold its default 100, continuing a served model trained 1,000);
  rlhf_ppo, which has no labels the gate could judge it against, gets a damaged
  candidate instead: a fresh policy trained 8 steps at learning rate 1.0 on a new clean
  task file (continuing the served policy at that rate, it still came out better than
  the served one in a first try: why was not looked into). Target: rejected in >= 9 of 10.
* **clean growth**: ``records`` fresh clean records appended, a candidate trained; when
  it is ``inconclusive``, up to two more runs, each after ``records // 4`` more clean
  records (the kept candidate is judged again first). Target: promoted in >= 8 of 10,
  counting one kept inconclusive and promoted when judged again.

The cost: clean growth's first run, all that ``run_plugin`` does besides the plugin's
``train`` (scoring the served model, the watch, the gate) over the run's wall time; with
``--cost N`` once more at a pool of N records (N // 2 served, N // 2 arriving).
``--pair FILE`` (se_darwin) keeps the first clean growth's candidate and served model's
per-record losses on a fresh pool (``records`` records, seed 40,000 + s: records neither
trained on), segments included, for ``benchmarks/gate_power.py``.
"""

from __future__ import annotations

import collections
import logging
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from judged_cases import Agent, Run, agents, parse, report, run, serve_first

from genesis_fp16.plugin_api import PrecisionRequest, TrainRequest
from genesis_fp16_infrastructure.agent_folder.candidates import newest_checkpoint
from genesis_fp16_infrastructure.agent_folder.pointer import candidates_dir, served_checkpoint


def cut_short(agent: Agent, served: Path, batches: list[Any], seed: int) -> Run:
    folder = served.with_name(served.name + "-short")
    shutil.copytree(served, folder)
    new = agent.clean(len_of(agent, batches[0]), seed + 1000)
    bad = agent.wrong(new, seed) if agent.has_labels else new
    return run(
        agent,
        folder,
        [*batches, bad],
        steps=agent.short_steps,
        options=agent.short_options,
        resume=agent.short_resume,
    )


def clean_growth(agent: Agent, served: Path, batches: list[Any], seed: int) -> tuple[str, Run]:
    folder = served.with_name(served.name + "-grow")
    shutil.copytree(served, folder)
    records = len_of(agent, batches[0])
    grown = [*batches, agent.clean(records, seed + 2000)]
    first = run(agent, folder, grown)
    if first.outcome != "inconclusive":
        return f"{first.outcome} at once", first
    kept = first.result.gate.candidate_id if first.result.gate else None
    for more in range(2):
        grown.append(agent.clean(records // 4, seed + 3000 + more))
        later = run(agent, folder, grown)
        gate = later.result.gate
        if gate is not None and gate.outcome in ("promoted", "rejected"):
            who = "judged again" if gate.candidate_id == kept else "a later candidate"
            return f"{gate.outcome}, {who}", first
    return "inconclusive after 3 runs", first


def len_of(agent: Agent, batch: Any) -> int:
    if isinstance(batch, list):
        return len(batch)
    return len(batch.get("trajectories") or batch.get("eval_prompts"))


def keep_pair(agent: Agent, folder: Path, first: Run, seed: int, records: int, out: Path) -> None:
    """Both models' per-record losses on a fresh pool, for gate_power.py."""
    assert first.result.gate is not None and first.result.gate.candidate_id is not None
    checkpoints = folder.with_name(folder.name + "-grow") / "checkpoints"
    served = served_checkpoint(folder / "checkpoints")
    candidate = newest_checkpoint(candidates_dir(checkpoints) / first.result.gate.candidate_id)
    fresh = folder.with_name("fresh")
    fresh.mkdir(exist_ok=True)
    data = agent.write(fresh, [agent.clean(records, 40_000 + seed)])
    request = TrainRequest(
        agent=agent.name,
        precision=PrecisionRequest("fp32"),
        precision_reason="benchmark",
        state_dir=fresh,
        checkpoint_dir=fresh / "ck",
        device="cpu",
        data_path=data,
    )
    assert served is not None and candidate is not None
    a = agent.plugin.score_records(candidate, request)
    b = agent.plugin.score_records(served, request)
    assert a.ids == b.ids
    np.savez_compressed(
        out,
        candidate=np.array(a.column()),
        served=np.array(b.column()),
        segments=np.array(a.segments or ["all"] * len(a.ids)),
    )


def cost_row(agent: Agent, root: Path, records: int, repeats: int) -> str:
    """The cost case at a pool of ``records``: a first model served on half of them, a
    second promoted after a quarter more (so that the watch has a predecessor to score, as
    in every later run), then the measured run after the last quarter, ``repeats`` times
    from copies of that state: judged (``run_plugin``), and the same plan's ``train``
    alone (no judging, in a candidate folder as the judged run gives it). Each measured
    run starts with the records read once (``run(warm=True)``: the first read of the new
    records is train's work, whoever pays it), so judging's cost is what the judged run
    does outside train, by the process's CPU seconds within that one run (paired: the
    steadiest figure on a shared machine), and what it adds over train alone. Every run
    trains the plugin's default budget, as a scheduled run with no ``STEPS_PER_RUN``
    does (rlhf_ppo's gate cases train 40 steps to keep their sequences short; its
    default is 240)."""
    served, batches = serve_first(agent, root, f"{agent.name}-cost", records // 2, 99)
    batches = [*batches, agent.clean(records // 4, 2099)]
    second = run(agent, served, batches)
    batches = [*batches, agent.clean(records - records // 2 - records // 4, 3099)]
    judged: list[Run] = []
    alone: list[Run] = []
    for repeat in range(repeats):
        for kind in ("judged", "alone") if repeat % 2 == 0 else ("alone", "judged"):
            folder = served.with_name(f"{served.name}-{kind}-{repeat}")
            shutil.copytree(served, folder)
            if kind == "judged":
                judged.append(run(agent, folder, batches, warm=True, steps=None))
            else:
                alone.append(run(agent, folder, batches, judged=False, warm=True, steps=None))
            shutil.rmtree(folder, ignore_errors=True)
    wall = statistics.median(r.wall for r in judged)
    plain = statistics.median(r.wall for r in alone)
    cpu = statistics.median(r.cpu for r in judged)
    plain_cpu = statistics.median(r.cpu for r in alone)
    shares = sorted(100 * r.judging_cpu_share for r in judged)
    return (
        f"| {agent.name} | {records:,} | {second.outcome} | {wall:.2f} s ({_span(judged)}) | "
        f"{plain:.2f} s ({_span(alone)}) | {statistics.median(shares):.1f}% "
        f"({shares[0]:.1f}-{shares[-1]:.1f}) | "
        f"{cpu:.2f} s / {plain_cpu:.2f} s: {100 * (cpu - plain_cpu) / cpu:.1f}% | "
        f"{', '.join(sorted({r.outcome for r in judged}))} |"
    )


def _span(runs: list[Run]) -> str:
    """The runs' wall seconds, lowest to highest."""
    return f"{min(r.wall for r in runs):.2f}-{max(r.wall for r in runs):.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = parse(__doc__, argv)
    parser.add_argument("--cost", type=int, default=0, help="a pool of N records, once")
    parser.add_argument("--cost-repeats", type=int, default=3, help="the cost case's runs")
    parser.add_argument("--pair", type=Path, help="se_darwin's pair, for gate_power.py")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    counts: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
        collections.Counter
    )
    shares: dict[str, list[float]] = collections.defaultdict(list)
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        every = agents(Path(tmp))
        for name in args.agents.split(","):
            agent = every[name]
            for seed in range(args.sequences):
                served, batches = serve_first(
                    agent, Path(tmp), f"{name}-{seed}", args.records, seed
                )
                short = cut_short(agent, served, batches, seed)
                growth, first = clean_growth(agent, served, batches, seed)
                if args.pair is not None and name == "se_darwin" and seed == 0:
                    keep_pair(agent, served, first, seed, args.records, args.pair)
                counts[name, "cut short"][short.outcome] += 1
                counts[name, "clean growth"][growth] += 1
                shares[name].append(first.judging_share)
                why = short.result.gate.reason[:140] if short.result.gate else ""
                grew = first.result.gate.reason[:140] if first.result.gate else ""
                rows.append(
                    f"| {name} | {seed} | {short.outcome}: {why} | {growth}; first: "
                    f"{grew} | {first.wall:.2f} s, {100 * first.judging_share:.1f}% |"
                )
                print(name, seed, short.outcome, growth, file=sys.stderr, flush=True)
                write(args, argv, counts, shares, rows, [])
            shutil.rmtree(Path(tmp) / "fresh", ignore_errors=True)
        costs = []
        for name in args.agents.split(",") if args.cost else []:
            costs.append(cost_row(every[name], Path(tmp), args.cost, args.cost_repeats))
            write(args, argv, counts, shares, rows, costs)
    print(write(args, argv, counts, shares, rows, costs), end="")


def write(
    args: Any, argv: list[str] | None, counts: Any, shares: Any, rows: list[str], costs: list[str]
) -> str:
    lines = ["| agent | case | outcomes (of the sequences run) |", "| --- | --- | --- |"]
    for (name, case), found in counts.items():
        total = sum(found.values())
        lines.append(
            f"| {name} | {case} | "
            + ", ".join(f"{k} {v} of {total}" for k, v in sorted(found.items()))
            + " |"
        )
    lines += [
        "",
        "Judging and watching as a share of clean growth's first run (median, range):",
        "",
    ]
    for name, found in shares.items():
        lines.append(
            f"- {name}: {100 * statistics.median(found):.1f}% "
            f"({100 * min(found):.1f}-{100 * max(found):.1f}%), {len(found)} runs"
        )
    if costs:
        lines += [
            "",
            "The cost case (`cost_row`), each run with the records read once before it "
            "(the first read of new records is train's work): median wall of the judged "
            "run and of the same plan's train alone (range); judging's share: the judged "
            "run's CPU seconds outside train over its own (median, range: paired within "
            "each run, the steadiest figure on a shared machine); and the CPU seconds of "
            "the judged run over train alone's, with what judging adds:",
            "",
            "| agent | records | second model | judged run | train alone | judging's CPU "
            "share in the judged run | CPU judged / alone: judging adds | verdicts |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *costs,
        ]
    lines += [
        "",
        "| agent | seed | cut short | clean growth | growth run, judging share |",
        "| --- | --- | --- | --- | --- |",
        *rows,
    ]
    return report(
        args,
        "The gate on issue 68's cases, per agent",
        sys.argv[1:] if argv is None else argv,
        lines,
    )


if __name__ == "__main__":
    main()
