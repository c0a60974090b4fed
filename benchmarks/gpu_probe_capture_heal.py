"""Probe, on a real CUDA device, what a failed graph capture leaves behind and what heals it.

Written before the product's heal (issue 67) to settle, on the torch the GPU image has, the
questions the 2026-11-26 forensics left at "medium confidence": after a capture that the
driver invalidates (a host sync inside it), is the default CUDA generator stuck in its
capture state, is the current stream left as the side stream, and which of two heals (a tiny
capture that ends cleanly; ``graphsafe_set_state(clone_state())``) brings eager draws,
dropout and a second capture back. Also times the one-time ``import torch._dynamo`` and
counts syncs with ``torch.cuda.set_sync_debug_mode``. Prints one JSON object.

    python benchmarks/gpu_probe_capture_heal.py > probe.json
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback

import torch


def _try(fn) -> str:
    try:
        fn()
        return "ok"
    except Exception as exc:  # the message is the finding
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"


def _poison(side: torch.cuda.Stream) -> str:
    x = torch.ones(64, device="cuda")  # no draw: the generator may be stuck already
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=side):
            y = x * 2
            y.sum().item()  # a host sync: invalidates the capture
        return "capture did not fail"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"


def _state(main: torch.cuda.Stream) -> dict[str, object]:
    return {
        "current_is_main": torch.cuda.current_stream() == main,
        "capturing": torch.cuda.is_current_stream_capturing(),
        "rand": _try(lambda: torch.rand(4, device="cuda")),
        "dropout": _try(lambda: torch.nn.functional.dropout(torch.ones(8, device="cuda"), 0.5)),
    }


def _tiny_capture(side: torch.cuda.Stream) -> None:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        torch.rand(1, device="cuda")
    del graph


def _second_capture(side: torch.cuda.Stream) -> str:
    def go() -> None:
        w = torch.randn(32, 32, device="cuda")
        x = torch.randn(8, 32, device="cuda")
        for _ in range(3):
            with torch.cuda.stream(side):
                torch.nn.functional.dropout(x @ w, 0.1)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            out = torch.nn.functional.dropout(x @ w, 0.1)
        graph.replay()
        first = out.clone()
        graph.replay()
        torch.cuda.synchronize()
        assert not torch.equal(first, out), "dropout repeated across replays"

    return _try(go)


def main() -> int:
    report: dict[str, object] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    started = time.perf_counter()
    importlib.import_module("torch._dynamo")  # the one-time cost calibration used to pay

    report["import_dynamo_s"] = round(time.perf_counter() - started, 3)
    started = time.perf_counter()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    report["cuda_init_s"] = round(time.perf_counter() - started, 3)
    report["device"] = torch.cuda.get_device_name()
    main_stream = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    for heal in ("none", "restore_stream_only", "tiny_capture", "graphsafe_set_state"):
        torch.cuda.set_stream(main_stream)
        row: dict[str, object] = {}
        try:
            row["failure"] = _poison(side)
            row["after_failure"] = _state(main_stream)
            if heal != "none":
                torch.cuda.set_stream(main_stream)
            if heal == "tiny_capture":
                row["heal"] = _try(lambda: _tiny_capture(side))
            elif heal == "graphsafe_set_state":
                g = torch.cuda.default_generators[0]
                row["heal"] = _try(lambda g=g: g.graphsafe_set_state(g.clone_state()))
            row["after_heal"] = _state(main_stream)
            row["second_capture"] = _second_capture(side)
        except Exception:
            row["error"] = traceback.format_exc(limit=2)[-400:]
        report[heal] = row
        if heal == "none" and row.get("after_failure", {}).get("rand") != "ok":  # type: ignore[attr-defined]
            torch.cuda.set_stream(main_stream)
            report["none_recovered_by_tiny_capture"] = _try(lambda: _tiny_capture(side))
            report["none_after"] = _state(main_stream)
    # sync counting: a pageable H2D copy warns, a pinned non_blocking one does not
    torch.cuda.set_stream(main_stream)
    counts: dict[str, object] = {}
    for name, fn in {
        "pageable_to_cuda": lambda: torch.arange(10).to("cuda"),
        "pinned_non_blocking": lambda: torch.arange(10).pin_memory().to("cuda", non_blocking=True),
        "item": lambda: torch.ones(1, device="cuda").item(),
        "index_select_device": lambda: torch.ones(10, 3, device="cuda")[
            torch.arange(4, device="cuda")
        ],
    }.items():
        torch.cuda.set_sync_debug_mode("error")
        counts[name] = _try(fn)
        torch.cuda.set_sync_debug_mode(0)
    report["sync_debug_error_mode"] = counts
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
