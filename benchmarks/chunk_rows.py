"""Rows a chunk in a scoring or evaluation forward (``predict.forward_chunked``), issue 90.

For each model width and row count, one forward of the ensemble over random rows with
each setting of (``CHUNK_ACTIVATIONS``, ``MIN_CHUNK_ROWS``), interleaved repeat by repeat,
timed by the thread's CPU clock; the median, and whether every setting's success logits
are the same bits as the first's. On the CPU only: another device's chunks follow
``ACCELERATOR_CHUNK_ACTIVATIONS`` (``predict.chunk_rows``), which this does not set::

    python benchmarks/chunk_rows.py \\
        --cases 64:19548:21,64:196000:5,256:19548:7,1024:4000:3,2048:2000:3
"""

from __future__ import annotations

import argparse
import statistics

import torch
from thread_clock import thread_ms

from genesis_fp16_infrastructure.world_model import predict
from genesis_fp16_infrastructure.world_model.model import ModelConfig, build_world_model

SETTINGS = ((1 << 20, 1), (1 << 19, 1), (1 << 19, 256))  # (activations, least rows)


def case(hidden: int, rows: int, repeats: int) -> str:
    """One model width's Markdown row: each setting's rows a chunk and median ms."""
    config = ModelConfig(in_features=49, hidden=hidden, depth=2, dropout=0.0, members=5)
    model = build_world_model(config).eval()
    x = torch.randn(rows, config.in_features)
    spent: dict[tuple[int, int], list[float]] = {s: [] for s in SETTINGS}
    logits = {}
    with torch.no_grad():
        for _ in range(repeats):
            for setting in SETTINGS:
                predict.CHUNK_ACTIVATIONS, predict.MIN_CHUNK_ROWS = setting
                ms, out = thread_ms(lambda: predict.forward_chunked(model, x))
                spent[setting].append(ms)
                logits[setting] = out.success_logit
    first = logits[SETTINGS[0]]
    same = all(torch.equal(first, v) for v in logits.values())
    width = config.members * hidden
    cells = []
    for setting in SETTINGS:
        activations, least = setting
        rows_a_chunk = max(least, activations // width)
        cells.append(f"{rows_a_chunk:,} rows {statistics.median(spent[setting]):.1f}")
    return f"| 5 x {hidden} | {rows:,} | {repeats} | " + " | ".join(cells) + f" | {same} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="64:19548:21,64:196000:5,256:19548:7,2048:2000:3")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = [f"{a.bit_length() - 1} bits, least {least}: ms" for a, least in SETTINGS]
    print("| model | rows | repeats | " + " | ".join(names) + " | same bits |")
    print("|---|---:|---:|" + "---:|" * len(SETTINGS) + "---|")
    for text in args.cases.split(","):
        hidden, rows, repeats = (int(v) for v in text.split(":"))
        print(case(hidden, rows, repeats), flush=True)


if __name__ == "__main__":
    main()
