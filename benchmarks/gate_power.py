"""The gate's power (issue 68 item 4): the share of candidates promoted, inconclusive and
rejected at 200, 1,000 and 5,000 records per segment, by the judged run's own rule.

    python benchmarks/gate_power.py [--pair FILE] [--segments 4] [--replays 200] [--out FILE]

The per-record losses are a real se_darwin pair: a clean growth candidate and the model
served before it, both scored by se_darwin's ``score_records`` on a fresh pool neither
trained on (``benchmarks/promotion_gate.py --pair``; kept in
``benchmarks/results/gate_power_pair_se_darwin.npz``). Each replay draws, per segment,
``n`` records with replacement from those pairs, centres their differences (candidate -
served) on zero and shifts them by the segment's effect (the candidate's loss is the
served model's plus that difference, clipped to the loss span as the gate clips), and
hands them to the gate's ``compare_segments`` (every segment known to the served model)
and ``decide``: the required pooled question and one veto per segment of >= 100
records, Holm over all. Margin: se_darwin's ``judging_margin`` (0.01 nats). Columns:
every segment at effect -0.02, -0.01, 0 or +0.01 nats, and one segment poisoned (+0.05
nats: five margins) while the others are better by 0.01. NumPy and the gate's own
code, no training: about a minute of CPU at the default 200 replays (the gate pairs
records by id in Python).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np
from judged_cases import header

from genesis_fp16.plugin_api import RecordLosses
from genesis_fp16_infrastructure.judging.gate import compare_segments, decide
from genesis_fp16_infrastructure.recipes.retrain.scoring import LOSS_SPAN, MARGIN

PAIR = Path(__file__).parent / "results" / "gate_power_pair_se_darwin.npz"
SIZES = (200, 1_000, 5_000)
COLUMNS = {
    "all -0.02": lambda k: -0.02,
    "all -0.01": lambda k: -0.01,
    "all +0.00": lambda k: 0.0,
    "all +0.01": lambda k: 0.01,
    "one poisoned (+0.05), rest -0.01": lambda k: 0.05 if k == 0 else -0.01,
}


def replay(
    diffs: np.ndarray, served: np.ndarray, n: int, effects: list[float], rng: np.random.Generator
) -> str:
    """One candidate's verdict: ``n`` records a segment, each shifted by its effect."""
    a, b, keys = [], [], []
    for k, effect in enumerate(effects):
        pick = rng.integers(0, len(diffs), n)
        b.append(served[pick])
        a.append(np.clip(served[pick] + diffs[pick] + effect, 0.0, LOSS_SPAN))
        keys += [f"s{k}"] * n
    ids = [str(i) for i in range(len(keys))]
    candidate = RecordLosses.of(ids, np.concatenate(a), keys)
    reference = RecordLosses.of(ids, np.concatenate(b), keys)
    asked = compare_segments(
        "held_out", candidate, reference, LOSS_SPAN, lambda m: MARGIN["log_loss"], known=None
    )
    return decide(asked)[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", type=Path, default=PAIR)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    pair = np.load(args.pair)
    served = pair["served"].astype(np.float64)
    diffs = pair["candidate"] - served
    diffs = diffs - diffs.mean()
    rng = np.random.default_rng(0)
    lines = [
        f"Pair: {len(diffs)} records, per-record difference s.d. {diffs.std():.4f} nats; "
        f"{args.segments} segments, {args.replays} replays a cell; "
        f"margin {MARGIN['log_loss']} nats; "
        "promoted / inconclusive / rejected.",
        "",
        "| records per segment | " + " | ".join(COLUMNS) + " |",
        "| --- |" + " --- |" * len(COLUMNS),
    ]
    for n in SIZES:
        cells = []
        for effect in COLUMNS.values():
            effects = [effect(k) for k in range(args.segments)]
            found = collections.Counter(
                replay(diffs, served, n, effects, rng) for _ in range(args.replays)
            )
            cells.append(
                " / ".join(
                    f"{100 * found[o] / args.replays:.0f}%"
                    for o in ("promoted", "inconclusive", "rejected")
                )
            )
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    text = (
        "\n".join([*header("The gate's power", sys.argv[1:] if argv is None else argv), *lines])
        + "\n"
    )
    if args.out is not None:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
