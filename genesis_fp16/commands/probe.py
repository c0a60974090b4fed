"""`genesis-fp16 probe AGENT`: what FP16 and BF16 do to an agent's model, against FP32.

Runs every precision variant of the agent's own model, loss and data from the same FP32
weights and seed, grades each measure green / amber / red, and recommends the cheapest
variant that is green everywhere and not slower than FP32 on this device. Thresholds
and their basis: docs/precision-probe.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genesis_fp16.cli import UsageError
from genesis_fp16.commands.reading import command_plugin, command_settings
from genesis_fp16.commands.train_checks import check_data_and_device, integer_from
from genesis_fp16.config.agent_names import agent_argument
from genesis_fp16.config.settings import Settings, resolve_device
from genesis_fp16.launch.devices import deterministic_cublas
from genesis_fp16_infrastructure.api import write_json_atomic

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.api import ProbeReport

# genesis_fp16_infrastructure.probe.runner.OPTIMIZERS, repeated: that module imports torch, and the
# parser (--help included) is built without it. A test checks that the two agree.
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "probe", help="measure what fp16/bf16 do to an agent's model", description=__doc__
    )
    parser.add_argument(
        "agent", type=agent_argument, help="agent plugin name (see `genesis-fp16 agents`)"
    )
    parser.add_argument("--data", type=Path, help="data the agent builds its batches from")
    parser.add_argument(
        "--steps",
        type=integer_from(1),
        help="optimizer steps per variant (default: GENESIS_FP16_PROBE_STEPS, 10)",
    )
    parser.add_argument("--seed", type=integer_from(0), help="seed (default: GENESIS_FP16_SEED, 0)")
    parser.add_argument(
        "--device",
        help="cpu, cuda or cuda:N (default: the agent's DEVICE, else GENESIS_FP16_DEVICE, "
        "auto), as for train",
    )
    parser.add_argument(
        "--optimizer", choices=OPTIMIZERS, default="sgd", help="optimizer of the N-step part"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="folder for probe-AGENT.json and probe-AGENT.png")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The probe runs models through torch: imported here, not at the top, because cli.py
    # imports every command module to build its parser and --help should not wait for it.
    from genesis_fp16_infrastructure.api import ProbeError, run_probe

    if args.out is not None and importlib.util.find_spec("matplotlib") is None:
        raise UsageError(
            "--out writes a plot, which needs matplotlib: pip install 'genesis-fp16[plot]'"
        )
    check_data_and_device(args)
    # The probe changes nothing (a refused .env: its other lines, said on stderr).
    settings = command_settings("probe")
    plugin, _ = command_plugin(args.agent, settings)
    apply_defaults(args, settings)
    deterministic_cublas(args.device)  # before CUDA starts
    try:
        setup = plugin.probe_setup(args.data, args.seed)
        report = run_probe(
            setup, args.device, steps=args.steps, seed=args.seed, optimizer=args.optimizer
        )
    except (ProbeError, NotImplementedError) as exc:
        raise UsageError(f"cannot probe agent {args.agent!r}: {exc}") from None
    except RuntimeError as exc:  # e.g. an unknown or absent --device
        raise UsageError(f"cannot probe agent {args.agent!r} on {args.device!r}: {exc}") from None
    out = {"agent": args.agent, **report.to_json()}
    if args.out is not None:
        out["files"] = _write_files(args, report, out)
    if args.json:
        print(json.dumps(out))
    else:
        print(report.table())
        for kind, path in out.get("files", {}).items():
            print(f"{kind}: {path}")
    return 0


def _write_files(args: argparse.Namespace, report: Any, out: dict[str, Any]) -> dict[str, str]:
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / f"probe-{args.agent}.json"
    write_json_atomic(data, out)
    plot = plot_layer_errors(report, args.out / f"probe-{args.agent}.png", f"probe: {args.agent}")
    return {"json": str(data), "plot": str(plot)}


def plot_layer_errors(report: ProbeReport, path: Path, title: str = "") -> Path:
    """Write a PNG of ||g - g32|| / ||g32|| per parameter for every low-precision variant.

    matplotlib is an optional extra (``pip install 'genesis-fp16[plot]'``), imported only
    when a plot is asked for."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: the plot only goes to a file
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError(
            f"the probe plot needs matplotlib ({exc}); install it with "
            "pip install 'genesis-fp16[plot]', or leave out --out"
        ) from None
    shown = [v for v in report.variants if v.family != "fp32" and v.error is None]
    layers = list(shown[0].measures.layer_errors) if shown else []
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(layers) + 3) + 3, 5))
    floor = 1e-12  # log axis: exact zeros (an FP32 island) drawn at the bottom
    for variant in shown:
        errors = [variant.measures.layer_errors[name] for name in layers]
        values = [e if math.isfinite(e) else 1e3 for e in errors]
        ax.plot(range(len(layers)), [max(v, floor) for v in values], marker="o", label=variant.name)
    ax.axhline(report.noise_floor, color="black", linestyle="--", label="minibatch noise floor")
    ax.set_yscale("log")
    ax.set_xticks(range(len(layers)), layers, rotation=90, fontsize=7)
    ax.set_ylabel("||g - g32|| / ||g32||  (non-finite at 1e3)")
    ax.set_title(title or f"precision probe on {report.device}: recommended {report.recommended}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def apply_defaults(args: argparse.Namespace, settings: Settings) -> None:
    """Unset --steps, --seed and --device take the settings' values, as train's do."""
    args.device = resolve_device(args.device or settings.agent(args.agent).device)
    args.steps = settings.probe_steps if args.steps is None else args.steps
    args.seed = settings.seed if args.seed is None else args.seed
