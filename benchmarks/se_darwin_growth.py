"""Does se_darwin learn from clean growth without losing a Genesis agent it knew? Issue 93,
item 4's case through the judged run, as a scheduled run judges it.

    python benchmarks/se_darwin_growth.py [--seeds 0,1,2] [--records 900]
        [--options '{"members": 1}']

For each seed s: a first model on four Genesis agents' pools (``generate_pool(records,
100 s + k, agent="agent_k")``, k = 0..3: one file each, all with the same base rate, so
the fifth is only more of the same), then ``agent_4``'s pool (seed 100 s + 4) at the
default budget; when that candidate is ``inconclusive``, one more clean batch of
``agent_4`` (seed 100 s + 50) and a run again. Each run through
``benchmarks/judged_cases.run`` (the daemon's plan, ``run_plugin``: served model scored,
candidate trained afresh, gated), fp32 on the CPU, one thread. ``--options`` sets the
plugin's options (``{"members": 1}``: one network a held-out run, as before issue 93).
Prints, per run, the verdict, the steps, and the candidate's held-out log-loss minus the
served model's over the known agents and on each known agent's segment, with its
finding (no_worse, inconclusive, worse).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import judged_cases  # the shared harness, beside this file (a script's folder is on the path)
import torch

from genesis_fp16_infrastructure.data.synthetic import generate_pool

AGENTS = tuple(f"agent_{k}" for k in range(5))
MORE_SEED = 50  # the one more clean batch's seed offset


def _row(seed: int, run: str, result: Any) -> str:
    gate = result.gate
    figures = []
    for c in gate.comparisons if gate is not None else []:
        if c.metric != "log_loss" or c.name != "held_out":
            continue
        served = float(c.reason.split(" vs served ")[1].split()[0])
        candidate = float(c.reason.split("log_loss ")[1].split()[0])
        figures.append(f"{c.segment or 'all known'} {candidate - served:+.4f} ({c.finding})")
    outcome = "up_to_date" if gate is None else gate.outcome
    steps = result.extra.get("total_steps")
    return f"| {seed} | {run} | {outcome} | {steps} | {'; '.join(figures)} |"


def case(seed: int, records: int, options: dict[str, Any]) -> list[str]:
    """The first model, the fifth agent's run and, if inconclusive, one more: table rows."""
    root = Path(tempfile.mkdtemp(prefix=f"growth-{seed}-"))
    agent = judged_cases.agents(root)["se_darwin"]
    batches = [generate_pool(records, seed * 100 + k, agent=AGENTS[k]) for k in range(5)]
    first = judged_cases.run(agent, root, batches[:4], seed=seed, options=options)
    rows = [_row(seed, "first (4 agents)", first.result)]
    grown = judged_cases.run(agent, root, batches, seed=seed, options=options)
    rows.append(_row(seed, "+ agent_4", grown.result))
    if grown.outcome == "inconclusive":
        batches.append(generate_pool(records, seed * 100 + MORE_SEED, agent=AGENTS[4]))
        more = judged_cases.run(agent, root, batches, seed=seed, options=options)
        rows.append(_row(seed, "+ one more batch", more.result))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--records", type=int, default=900, help="each agent's pool")
    parser.add_argument("--options", default="{}", help="the plugin's options, JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    options = json.loads(args.options)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        rows += case(seed, args.records, options)
        print(rows[-1], file=sys.stderr, flush=True)
    title = "se_darwin: a fifth agent's clean records (issue 93, item 4)"
    lines = [
        *judged_cases.header(title, argv if argv is not None else sys.argv[1:]),
        "| seed | run | verdict | steps | held-out log-loss, candidate - served (finding) |",
        "| --- | --- | --- | --- | --- |",
        *rows,
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
