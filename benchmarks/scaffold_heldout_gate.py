"""Issue 68's attack on the scaffold's judged agent, and clean growth, through the gate.

    python benchmarks/scaffold_heldout_gate.py [--records 1000] [--steps 100] [--sequences 8]
        [--held-out-alone] > results.md

For each sequence s: the scaffold's agent (``new-agent``'s source, imported) serves a
first model on ``records`` clean records (y = 2 sum(x) + noise, seed s), fp32 on the CPU,
``steps`` a run, resuming as a scheduled run does. Then, from a copy of that first run's
folder each time:

* **shuffled copies**: five copies of the pool with the labels shuffled among the records
  appended (same inputs, new lines, labels that say nothing), a candidate trained;
* **clean growth**: as many fresh clean records appended (seed s + 1000), a candidate.

Each row counts the gate's outcomes, with the comparison that decided (the verdict's
reason, cut). ``--held-out-alone`` leaves out the ``known`` set (the gate on held-out
records alone, as first built for issue 68). Writes a Markdown report to stdout.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import logging
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from genesis_fp16.plugin_api import PrecisionRequest, TrainRequest
from genesis_fp16.scaffold import agent_source
from genesis_fp16_infrastructure.judging import questions
from genesis_fp16_infrastructure.judging import run as judged_run

AGENT = "toy_bench"


def _plugin(folder: Path) -> Any:
    source = folder / f"{AGENT}.py"
    source.write_text(agent_source(AGENT))
    spec = importlib.util.spec_from_file_location(AGENT, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.plugin


def _clean(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    xs = [[round(rng.uniform(-1, 1), 6) for _ in range(4)] for _ in range(count)]
    return [json.dumps({"x": x, "y": round(2 * sum(x) + rng.gauss(0, 0.01), 6)}) for x in xs]


def _shuffled(lines: list[str], seed: int) -> list[str]:
    records = [json.loads(line) for line in lines]
    labels = [r["y"] for r in records]
    random.Random(seed).shuffle(labels)
    return [json.dumps({"x": r["x"], "y": y}) for r, y in zip(records, labels, strict=True)]


def _run(plugin: Any, folder: Path, lines: list[str], steps: int) -> Any:
    data = folder / "records.jsonl"
    data.write_text("\n".join(lines) + "\n")
    request = TrainRequest(
        agent=AGENT,
        precision=PrecisionRequest("fp32"),
        precision_reason="benchmark",
        state_dir=folder,
        checkpoint_dir=folder / "checkpoints",
        device="cpu",
        seed=1,
        steps=steps,
        resume=True,
        data_path=data,
    )
    return judged_run.run_plugin(plugin, request)


def _sequence(seed: int, records: int, steps: int, root: Path) -> dict[str, str]:
    served = root / f"served-{seed}"
    served.mkdir()
    plugin = _plugin(served)
    pool = _clean(records, seed)
    first = _run(plugin, served, pool, steps)
    assert first.gate is not None and first.gate.outcome == "promoted", first.gate
    cases = {
        "shuffled copies": pool + [x for k in range(5) for x in _shuffled(pool, 100 + k)],
        "clean growth": pool + _clean(records, seed + 1000),
    }
    found = {}
    for name, lines in cases.items():
        folder = root / f"{name.replace(' ', '-')}-{seed}"
        shutil.copytree(served, folder)
        result = _run(plugin, folder, lines, steps)
        gate = result.gate
        found[name] = f"{gate.outcome}: {gate.reason[:160]}" if gate else "no gate"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--held-out-alone", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    if args.held_out_alone:
        setattr(questions, "_on_known", lambda *a, **k: None)  # noqa: B010 (a private name)
    started = time.monotonic()
    outcomes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.sequences):
            for name, verdict in _sequence(seed, args.records, args.steps, Path(tmp)).items():
                outcomes[name][verdict.split(":")[0]] += 1
                lines.append(f"| {seed} | {name} | {verdict} |")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"# The scaffold's gate on issue 68's attack ({platform.processor() or 'cpu'})\n")
    print(f"`python benchmarks/scaffold_heldout_gate.py {' '.join(sys.argv[1:])}` at {commit}, ")
    print(f"fp32 on the CPU, {time.monotonic() - started:.0f} s\n")
    for name, counts in outcomes.items():
        print(f"- **{name}**: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("\n| seed | case | verdict |\n| --- | --- | --- |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
