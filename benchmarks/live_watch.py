"""Does the live watch roll back the poison the gate could not see, and nothing else?
Issue 68's watch cases on each agent, through ``run_plugin``.

    python benchmarks/live_watch.py [--agents se_darwin,scaffold,rlhf_ppo]
        [--sequences 10] [--records 2000] [--clean-runs 10] [--out FILE]

For each agent and sequence s (``benchmarks/judged_cases.py`` says what an agent's
batch and poison are), a first model served on ``records`` clean records (seed s), then:

* **poison**: ``records // 2`` poisoned records appended (se_darwin: marked ``success``
  with no score; the scaffold: ``y = -2 sum(x)``; rlhf_ppo: a new task file with the
  reward reversed), a candidate trained and judged. When the gate does not promote it
  (it saw the poison: counted), it is served by hand all the same, since the case is the
  watch's. Then up to four runs, each after ``records // 4`` clean records (rlhf_ppo: a
  new clean task file of ``records`` prompts): rolled back (the model before it served
  again), replaced by a later candidate the gate promoted, or still served. Target:
  rolled back in >= 9 of 10.
* **clean**: from a copy of the first folder, ``--clean-runs`` runs, each after
  ``records // 4`` clean records (rlhf_ppo: a new task file): false rollbacks over all
  the runs, and the gate's verdicts. Target: <= 1 in 100 runs.
"""

from __future__ import annotations

import collections
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from judged_cases import Agent, agents, parse, report, run, serve_by_hand, serve_first


def more(agent: Agent, records: int, seed: int) -> Any:
    """The next clean batch: a quarter of the pool, or rlhf_ppo's new task file."""
    return agent.clean(records if agent.name == "rlhf_ppo" else records // 4, seed)


def poison(agent: Agent, served: Path, batches: list[Any], seed: int, records: int) -> str:
    folder = served.with_name(served.name + "-poison")
    shutil.copytree(served, folder)
    grown = [*batches, agent.poison(agent.clean(max(records // 2, 1), seed + 5000))]
    poisoned = run(agent, folder, grown)
    gate = poisoned.outcome
    if gate != "promoted":
        serve_by_hand(folder, poisoned.result)
    for k in range(4):
        grown.append(more(agent, records, seed + 6000 + k))
        later = run(agent, folder, grown)
        if later.rolled_back:
            return f"gate {gate}; rolled back at clean batch {k + 1}"
        if later.outcome == "promoted":
            return f"gate {gate}; replaced by a later candidate at clean batch {k + 1}"
    return f"gate {gate}; still served after 4 clean batches"


def clean(agent: Agent, served: Path, batches: list[Any], seed: int, args: Any) -> Any:
    folder = served.with_name(served.name + "-clean")
    shutil.copytree(served, folder)
    grown, found = list(batches), collections.Counter[str]()
    for k in range(args.clean_runs):
        grown.append(more(agent, args.records, seed + 7000 + k))
        later = run(agent, folder, grown)
        found["rolled back" if later.rolled_back else "not rolled back"] += 1
        found[f"gate {later.outcome}"] += 1
    return found


def main(argv: list[str] | None = None) -> None:
    parser = parse(__doc__, argv)
    parser.add_argument("--clean-runs", type=int, default=10, help="per sequence")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    poisoned: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    cleans: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    rows: list[str] = []
    text = ""
    with tempfile.TemporaryDirectory() as tmp:
        every = agents(Path(tmp))
        for name in args.agents.split(","):
            agent = every[name]
            for seed in range(args.sequences):
                served, batches = serve_first(
                    agent, Path(tmp), f"{name}-{seed}", args.records, seed
                )
                found = poison(agent, served, batches, seed, args.records)
                poisoned[name][found.split(";")[1].split(" at ")[0].strip()] += 1
                counts = clean(agent, served, batches, seed, args)
                cleans[name].update(counts)
                rows.append(
                    f"| {name} | {seed} | {found} | "
                    + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                    + " |"
                )
                print(name, seed, found, dict(counts), file=sys.stderr, flush=True)
                text = write(args, argv, poisoned, cleans, rows)
    print(text, end="")


def write(args: Any, argv: list[str] | None, poisoned: Any, cleans: Any, rows: list[str]) -> str:
    lines = ["| agent | poison (sequences run) | clean runs |", "| --- | --- | --- |"]
    for name, found in poisoned.items():
        total = sum(found.values())
        lines.append(
            f"| {name} | "
            + ", ".join(f"{k} {v} of {total}" for k, v in sorted(found.items()))
            + " | "
            + ", ".join(f"{k} {v}" for k, v in sorted(cleans[name].items()))
            + " |"
        )
    lines += ["", "| agent | seed | poison | clean runs |", "| --- | --- | --- | --- |", *rows]
    return report(
        args,
        "The live watch on issue 68's cases, per agent",
        sys.argv[1:] if argv is None else argv,
        lines,
    )


if __name__ == "__main__":
    main()
