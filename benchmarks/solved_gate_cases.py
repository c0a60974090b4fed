"""rlhf_ppo's gate once its policy solves the task: does ``judging_margin_floor`` promote a
clean continued run and still reject damaged candidates (issue 93)?

    python benchmarks/solved_gate_cases.py [--sequences 3] [--records 2000] [--out FILE]
        [--cases "NAME;..."]

The gate's margin is 5% of the served loss; rlhf_ppo declares a floor of 0.001 under it
(docs/judging.md, "The margins"). Issue 68's cases (``promotion_gate.py``) judge against
a served loss of about 0.18, where 5% is 0.009 and the floor changes nothing; this asks
the same questions where it does. For each sequence s, through ``run_plugin`` as the
daemon runs it (``judged_cases.py``, fp32, training seed 0: the seed whose policy solved
the task in the daemon's runs): a first model on a clean task file (seed s), then two
continued runs on new clean task files, each at the plugin's default budget, until the
served loss is under 0.02 (where the floor is more than 5%). Then, each from a copy of
that folder, and each twice (the plugin's floor, and no floor: the candidates are the
same, fp32 and seeded; only the margin differs):

* **clean continued**: a new clean task file, the default budget, continuing the served
  policy (what the daemon's next run does);
* **lr x3, continued**, **lr x10, continued** and **lr x33, continued**: the served
  policy continued 8 steps at learning rate 0.01, 0.03 and 0.1 (the default: 0.003) on a
  new clean task file, damage of smaller sizes;
* **damaged, continued**: the served policy continued 8 steps at learning rate 1.0 on a
  new clean task file;
* **damaged, fresh**: a fresh policy trained 8 steps at learning rate 1.0 on a new clean
  task file (``promotion_gate.py``'s cut-short candidate for rlhf_ppo).

Target: the damaged candidates rejected with the floor as without it; the clean one
promoted with the floor.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from judged_cases import Run, agents, parse, report, run

SOLVED = 0.02  # the served loss under which the floor (0.001) exceeds 5% of it
SEED = 0  # the training seed: seed 0 solved the task in rlhf_continued_runs.py --daemon

CASES: dict[str, dict[str, Any]] = {
    "clean continued": {},
    "lr x3, continued": {"steps": 8, "options": {"lr": 0.01, "critic_lr": 0.01}},
    "lr x10, continued": {"steps": 8, "options": {"lr": 0.03, "critic_lr": 0.03}},
    "lr x33, continued": {"steps": 8, "options": {"lr": 0.1, "critic_lr": 0.1}},
    "damaged, continued": {"steps": 8, "options": {"lr": 1.0, "critic_lr": 1.0}},
    "damaged, fresh": {"steps": 8, "options": {"lr": 1.0, "critic_lr": 1.0}, "resume": False},
}


def _served_loss(done: Run) -> float:
    gate = done.result.gate
    assert gate is not None and gate.outcome == "promoted", gate
    assert gate.candidate is not None, gate
    return gate.candidate.losses["loss"]


def _figures(done: Run) -> str:
    gate = done.result.gate
    if gate is None:
        return "no gate"
    figures = gate.comparisons[0].reason if gate.comparisons else gate.reason
    return f"**{gate.outcome}**: {figures}"


def sequence(
    agent: Any, root: Path, seed: int, records: int, cases: dict[str, dict[str, Any]]
) -> list[str]:
    """One sequence's rows: the served policy brought to a solved task, then each case
    with the floor and without."""
    folder = root / f"solved-{seed}"
    folder.mkdir()
    batches = [agent.clean(records, seed)]
    losses = [_served_loss(run(agent, folder, batches, steps=None, seed=SEED))]
    for more in range(2):
        batches.append(agent.clean(records, seed * 1000 + 100 + more))
        losses.append(_served_loss(run(agent, folder, batches, steps=None, seed=SEED)))
    served = " -> ".join(f"{loss:.6f}" for loss in losses)
    if losses[-1] >= SOLVED:
        return [f"| {seed} | {served} | not solved: no case run | | |"]
    rows: list[str] = []
    fresh = [*batches, agent.clean(records, seed * 1000 + 200)]
    for case, kw in cases.items():
        verdicts = []
        for floor in (agent.plugin.judging_margin_floor, None):
            copy = root / f"solved-{seed}-{len(rows)}-{floor}"
            shutil.copytree(folder, copy)
            agent.plugin.judging_margin_floor = floor
            try:
                verdicts.append(_figures(run(agent, copy, fresh, seed=SEED, **kw)))
            finally:
                agent.plugin.judging_margin_floor = type(agent.plugin).judging_margin_floor
            shutil.rmtree(copy, ignore_errors=True)
        rows.append(f"| {seed} | {served} | {case} | {verdicts[0]} | {verdicts[1]} |")
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = parse(__doc__, argv)
    parser.set_defaults(sequences=3)
    parser.add_argument("--cases", help="only these cases (their names, separated by ;)")
    args = parser.parse_args(argv)
    names = args.cases.split(";") if args.cases else list(CASES)
    cases = {name: CASES[name] for name in names}
    logging.disable(logging.WARNING)
    lines = [
        "| sequence | served loss after runs 0-2 | case | with the floor (0.001) | "
        "without (5% of the served loss) |",
        "| --- | --- | --- | --- | --- |",
    ]
    title = "rlhf_ppo's gate on a solved task, with and without judging_margin_floor"
    with tempfile.TemporaryDirectory() as tmp:
        agent = agents(Path(tmp))["rlhf_ppo"]
        for seed in range(args.sequences):
            lines += sequence(agent, Path(tmp), seed, args.records, cases)
            report(args, title, argv or sys.argv[1:], lines)
    print(report(args, title, argv or sys.argv[1:], lines))


if __name__ == "__main__":
    main()
