"""Does the promotion gate promote good retrains, reject bad ones, and see shifts?

    python benchmarks/promotion_gate.py [--sequences 10] [--records 2000] > results.md

For each sequence s (pool ``generate_pool(records, seed=s)``, its first half served by
a first ``SEDarwinPlugin.train`` run, fp32, the default budget unless ``--max-epochs``), the
served folder is copied and one candidate of each kind is trained on it, resuming, as a
scheduled run would:

* **clean growth**: the whole pool (the second half's records are new and clean);
* **cut short**: the whole pool with ``steps=3`` (a run stopped early, then judged);
* **fp16 diverged**: the whole pool in fp16 with learning rate 3 and no guard;
* **flipped labels**: the second half with every label turned over, judged with a golden
  pool (``generate_pool(records // 2, seed=10_000 + s)``) as the operator would give one;
* **poison**: the second half marked ``"success"`` with no score, judged with the golden
  pool, and again without one (then the label-shift report is what sees it).

Each row counts promoted and rejected candidates, and a gate that could not decide (the
run fails: counted apart). The gate's cost is its phase's seconds over the run's wall
seconds (clean growth). Then five shifts of the second half are scored by the drift
report against the first half (no training; a random half of each sequence's pool): a
new agent, the success rate raised to 0.6, a tool renamed, ``generation`` × 10 (one
numeric feature), and none. CPU, torch's default threads. Writes a Markdown report to
stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_agents.se_darwin.plugin import SEDarwinPlugin
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequest, TrainRequestError
from genesis_fp16_infrastructure.data.fingerprint import fingerprint, record_id_hash
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.judging.run import run_plugin
from genesis_fp16_infrastructure.recipes.retrain.drift import drift_report

PLUGIN = SEDarwinPlugin()
_FLIP = {"success": "failure", "failure": "success"}
Pool = dict[str, Any]


def _subset(pool: Pool, ids: list[str]) -> Pool:
    return {**pool, "trajectories": {k: pool["trajectories"][k] for k in ids}}


def _flip(record: dict[str, Any]) -> None:
    if record.get("success_score") is not None:
        record["success_score"] = round(1.0 - record["success_score"], 3)
    record["status"] = _FLIP.get(record.get("status"), record.get("status"))


def _request(root: Path, data: Path, **kw: Any) -> TrainRequest:
    epochs = kw.pop("max_epochs")  # 0: the default budget (stops on validation)
    options = {**({"max_epochs": epochs} if epochs else {}), **kw.pop("options", {})}
    return TrainRequest(
        agent="se_darwin",
        precision=kw.pop("precision", "fp32"),
        precision_reason="benchmark",
        state_dir=root,
        checkpoint_dir=root / "ck",
        data_path=data,
        resume=True,
        options=options,
        **kw,
    )


def _train(request: TrainRequest) -> tuple[str, dict[str, Any]]:
    try:
        result = run_plugin(PLUGIN, request)
    except TrainRequestError as exc:
        return "undecided" if "promotion gate" in str(exc) else "error", {"error": str(exc)}
    return result.outcome, result.to_json()


def run_sequence(seed: int, records: int, max_epochs: int, work: Path) -> dict[str, Any]:
    pool = generate_pool(records, seed=seed)
    ids = list(pool["trajectories"])
    half = ids[: records // 2]
    base = work / f"s{seed}"
    (base / "data").mkdir(parents=True)
    (base / "data" / "pool.json").write_text(json.dumps(_subset(pool, half)))
    first, _ = _train(_request(base, base / "data", max_epochs=max_epochs))
    assert first == "success", first
    golden = work / f"golden{seed}.json"
    golden.write_text(json.dumps(generate_pool(records // 2, seed=10_000 + seed)))

    def scenario(name: str, edit: Callable[[Pool], Pool], **kw: Any) -> tuple[str, dict[str, Any]]:
        root = work / f"s{seed}-{name}"
        shutil.copytree(base, root)
        (root / "data" / "pool.json").write_text(json.dumps(edit(json.loads(json.dumps(pool)))))
        return _train(_request(root, root / "data", max_epochs=max_epochs, **kw))

    def flipped(grown: Pool) -> Pool:
        for key in ids[records // 2 :]:
            _flip(grown["trajectories"][key])
        return grown

    def poisoned(grown: Pool) -> Pool:  # the poison: "success", and no score
        for key in ids[records // 2 :]:
            grown["trajectories"][key].update(status="success", success_score=None)
        return grown

    out: dict[str, Any] = {}
    out["clean"] = scenario("clean", lambda p: p)
    out["short"] = scenario("short", lambda p: p, steps=3)
    # Learning rate 3 in fp16 without the guard: finite, and far from what it learned (at
    # 30 every step overflows, and the run fails as "learned nothing" before any gate).
    out["fp16"] = scenario("fp16", lambda p: p, precision="fp16", options={"learning_rate": 3.0})
    out["flipped"] = scenario("flipped", flipped, golden_data_path=golden)
    out["poison"] = scenario("poison", poisoned, golden_data_path=golden)
    out["poison, no golden"] = scenario("poison-nogolden", poisoned)
    return out


def run_shifts(seed: int, records: int, work: Path) -> dict[str, dict[str, Any]]:
    """The drift report of five edits of the second half against the first half."""
    shifts: dict[str, Callable[[Pool, list[str]], None]] = {
        "new agent": lambda p, new: [p["trajectories"][k].update(agent_name="qa") for k in new],
        "success 0.6": lambda p, new: [
            p["trajectories"][k].update(success_score=0.9 if i % 5 < 3 else 0.1)
            for i, k in enumerate(new)
        ],
        "tool renamed": lambda p, new: [
            p["trajectories"][k].update(
                tools_used=[
                    t if t != "grep" else "ripgrep" for t in p["trajectories"][k]["tools_used"]
                ]
            )
            for k in new
        ],
        "generation x10": lambda p, new: [
            p["trajectories"][k].update(generation=10 * int(p["trajectories"][k]["generation"]))
            for k in new
        ],
        "none": lambda p, new: None,
    }
    out = {}
    for name, edit in shifts.items():
        pool = generate_pool(records, seed=seed)
        # A random half is "new": the reference and the new records come from the same
        # generations, so "none" measures the report's noise alone. (The pool's later half
        # would differ in its lineage features by construction: later generations have
        # deeper lineages, which a real pool's growth shows too.)
        ids = sorted(pool["trajectories"], key=lambda k: record_id_hash(f"{seed}:{k}"))
        served = read_pool_of(_subset(pool, ids[: records // 2]), work / "served.json")
        edit(pool, ids[records // 2 :])
        grown = read_pool_of(pool, work / "grown.json")
        report = drift_report(grown.columns, fingerprint(served.examples), seed)
        assert report is not None
        out[name] = report.to_json()
    return out


def read_pool_of(pool: Pool, path: Path) -> Any:
    path.write_text(json.dumps(pool))
    return read_trajectories(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sequences", type=int, default=10)
    parser.add_argument("--records", type=int, default=2000)  # the daemon's sample pool
    parser.add_argument("--max-epochs", type=int, default=0, help="0: the default budget")
    parser.add_argument(
        "--cost-sizes",
        type=lambda text: [int(x) for x in text.split(",") if x],
        default=[10_000, 40_000],
        help="pools of one clean growth each, for the gate's cost at scale",
    )
    parser.add_argument("--out", type=Path, help="rewrite the report here after each sequence")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    start = time.perf_counter()
    results: list[dict[str, Any]] = []
    shifts: list[dict[str, Any]] = []
    costs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for records in args.cost_sizes:
            costs.append(cost_at(records, Path(tmp)))
        for seed in range(args.sequences):
            shifts.append(run_shifts(seed, args.records, Path(tmp)))
            results.append(run_sequence(seed, args.records, args.max_epochs, Path(tmp)))
            print(f"sequence {seed}: {[r[0] for r in results[-1].values()]}", file=sys.stderr)
            if args.out is not None:  # a run stopped early still leaves what it measured
                report = _report(results, shifts, args, time.perf_counter() - start)
                args.out.write_text("\n".join([report, *_cost_table(costs)]))
    report = _report(results, shifts, args, time.perf_counter() - start)
    print(
        "\n".join([report, "", "Clean growth at larger pools (one run each):", *_cost_table(costs)])
    )
    return 0


def _report(
    results: list[dict[str, Any]], shifts: list[dict[str, Any]], args: Any, wall: float
) -> str:
    lines = [
        f"# Promotion gate: {len(results)} of {args.sequences} sequences of {args.records} records "
        f"(first half served, max_epochs {args.max_epochs or 'default budget'})",
        "",
        f"CPU ({torch.get_num_threads()} threads), torch {torch.__version__}; "
        f"`python benchmarks/promotion_gate.py --sequences {args.sequences} --records "
        f"{args.records} --max-epochs {args.max_epochs}`; {wall:.0f} s in all.",
        "",
        "| candidate | promoted | rejected | failed before the gate | undecided | other |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind in results[0] if results else ():
        outcomes = [r[kind][0] for r in results]
        counts = [outcomes.count(o) for o in ("success", "rejected", "failed", "undecided")]
        lines.append(f"| {kind} | {' | '.join(map(str, counts))} | {len(outcomes) - sum(counts)} |")
    flagged = [r["poison, no golden"][1].get("extra", {}).get("drift", {}) for r in results]
    lines += [
        "",
        f"Poison without a golden pool: label shift flagged in "
        f"{sum(bool(d.get('label_shift_flagged')) for d in flagged)} of {len(flagged)} runs.",
    ]
    lines += _costs(results)
    lines += [
        "",
        "| shift | sequences flagging the shifted feature | any feature flagged | "
        "label shift flagged | label shift (median) |",
        "| --- | --- | --- | --- | --- |",
    ]
    expected = {
        "new agent": "agent",
        "tool renamed": "tool",
        "generation x10": "log_generation",
        "success 0.6": None,
        "none": None,
    }
    for name, feature in expected.items():
        reports = [s[name] for s in shifts]
        hit = "-" if feature is None else str(sum(feature in r["flagged"] for r in reports))
        lines.append(
            f"| {name} | {hit} | {sum(bool(r['flagged']) for r in reports)} | "
            f"{sum(bool(r['label_shift_flagged']) for r in reports)} | "
            f"{statistics.median(r['label_shift'] for r in reports):+.3f} |"
        )
    reasons = [f"- {kind} s{i}: {_why(r[kind][1])}" for i, r in enumerate(results) for kind in r]
    return "\n".join([*lines, "", "Verdicts:", "", *reasons])


def _costs(results: list[dict[str, Any]]) -> list[str]:
    """The gate's and the drift report's share of the judged runs' wall time: the clean
    growth runs (what a scheduled run costs) apart from every judged run (the cut-short
    ones train 3 steps, so any gate is a large share of them)."""
    lines = [""]
    for label, kinds in (("clean growth", ("clean",)), ("all judged", None)):
        gate, drift = [], []
        for r in results:
            for kind, (outcome, data) in r.items():
                if outcome in ("success", "rejected") and (kinds is None or kind in kinds):
                    phases, wall = data["phases"], data["wall_seconds"]
                    gate.append(phases.get("gate", 0.0) / wall)
                    drift.append(phases.get("drift", 0.0) / wall)
        if gate:
            both = [g + d for g, d in zip(gate, drift, strict=True)]
            lines.append(
                f"- {label} runs ({len(gate)}), share of the run's wall time, median (max): "
                f"gate {statistics.median(gate):.1%} ({max(gate):.1%}), drift "
                f"{statistics.median(drift):.1%} ({max(drift):.1%}), together "
                f"{statistics.median(both):.1%} ({max(both):.1%})"
            )
    return lines


def cost_at(records: int, work: Path) -> dict[str, Any]:
    """One clean growth of a pool of ``records`` (its first half served): the run's phases."""
    pool = generate_pool(records, seed=0)
    ids = list(pool["trajectories"])
    root = work / f"cost{records}"
    (root / "data").mkdir(parents=True)
    (root / "data" / "pool.json").write_text(json.dumps(_subset(pool, ids[: records // 2])))
    first, _ = _train(_request(root, root / "data", max_epochs=0))
    assert first == "success", first
    (root / "data" / "pool.json").write_text(json.dumps(pool))
    outcome, data = _train(_request(root, root / "data", max_epochs=0))
    return {
        "records": records,
        "outcome": outcome,
        "wall": data["wall_seconds"],
        **data["phases"],
    }


def _cost_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "",
        "| pool | outcome | run wall s | train s | gate s | drift s | gate + drift |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        share = (r.get("gate", 0.0) + r.get("drift", 0.0)) / r["wall"]
        lines.append(
            f"| {r['records']} | {r['outcome']} | {r['wall']:.2f} | {r.get('train', 0.0):.2f} | "
            f"{r.get('gate', 0.0):.3f} | {r.get('drift', 0.0):.3f} | {share:.1%} |"
        )
    return lines


def _why(data: dict[str, Any]) -> str:
    return str(data.get("error") or (data.get("gate") or {}).get("reason"))


if __name__ == "__main__":
    sys.exit(main())
