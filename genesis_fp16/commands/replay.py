"""`genesis-fp16 replay BUNDLE [--precision P] [--device D] [--json]`: run a fault bundle's
step again.

A fault bundle (``precision show AGENT`` lists them; ``train --json`` names one in
``fault_bundle``) holds one step that went non-finite and the state before it. Replay
runs that step again from that state and says whether it reproduced (the same
non-finite pattern and the same loss bits where the loss was finite), the first module
and phase (forward, backward, optimizer) where a value became non-finite, each module's
largest magnitudes, and what the same step gives in fp32, bf16 and fp16. Exit 0 when it
ran (reproduced or not), 2 for a bundle that cannot be used.

The model comes from the bundle's agent: its plugin's ``replay_task(context)`` (a
``TrainingTask`` for the run the bundle came from) when it has one, else its
``probe_setup`` (the model and loss; the optimizers from the bundle's record).
A bundle from a CUDA run replays on the CPU with ``--device cpu``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from genesis_fp16.cli import UsageError

PRECISIONS = ("fp16", "bf16", "fp32")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="run a fault bundle's step again and say where it went non-finite",
        description=__doc__,
    )
    parser.add_argument("bundle", metavar="BUNDLE", help="a fault bundle file (*.fault.pt)")
    parser.add_argument(
        "--precision", choices=PRECISIONS, help="replay in this precision (default: the bundle's)"
    )
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: the bundle's)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from genesis_fp16_infrastructure.training.flight.bundle import BundleError, load_bundle
    from genesis_fp16_infrastructure.training.flight.replay import replay

    try:
        bundle = load_bundle(Path(args.bundle))  # to the CPU: RNG states must stay there
        report = replay(bundle, _target(bundle), args.precision, args.device)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(_finite(report)))
    else:
        print(describe(report))
    return 0


def _target(bundle: Mapping[str, Any]) -> Any:
    from genesis_fp16.config.plugins import PluginError, load_plugin
    from genesis_fp16.config.settings import SettingsError, load_settings
    from genesis_fp16_infrastructure.training.flight.bundle import BundleError
    from genesis_fp16_infrastructure.training.flight.replay import ReplayTarget

    context = bundle.get("context") or {}
    agent = context.get("agent")
    if not isinstance(agent, str):
        raise BundleError("the bundle names no agent: replay it from the library with its task")
    try:
        plugin = load_plugin(agent, load_settings().plugin_allowlist)
    except (SettingsError, PluginError) as exc:
        raise UsageError(str(exc)) from None
    make_task = getattr(plugin, "replay_task", None)
    if callable(make_task):
        return ReplayTarget.of_task(make_task(context))
    request = context.get("request") or {}
    data_path = request.get("data_path")
    try:
        setup = plugin.probe_setup(
            Path(data_path) if data_path else None, int(request.get("seed", 0))
        )
    except NotImplementedError as exc:
        raise UsageError(
            f"agent {agent!r} has neither replay_task nor probe_setup: {exc}"
        ) from None
    return ReplayTarget(setup.build_model, setup.loss)


def describe(report: Mapping[str, Any]) -> str:
    """The replay report as text: the verdict first, then where, then the precisions."""
    replayed, recorded = report["replayed"], report["recorded"]
    verdict = "reproduced" if report["reproduced"] else "did NOT reproduce"
    lines = [
        f"step {report['bundle_step']} ({report['reason']}), recorded in {recorded['precision']} "
        f"on {recorded['device']}, replayed in {replayed['precision']} on {replayed['device']}: "
        f"{verdict}" + ("" if report["same_setup"] else " (another precision or device)"),
    ]
    first = report["first_nonfinite"]
    if first is None:
        lines.append("first non-finite: none in this replay")
    else:
        lines.append(
            f"first non-finite: module {first['module']}, {first['phase']} ({first['tensor']})"
        )
    lines.append(
        f"per module (largest finite |value|; gradients unscaled, scale {report['loss_scale']:g}):"
    )
    for name, row in report["per_module"].items():
        lines.append(
            f"  {name:<30} forward {row['forward_max']:<12.4g} grad {row['grad_max']:<12.4g} "
            f"non-finite {row['nonfinite']}"
        )
    lines.append("the same step in each precision:")
    for name, row in report["precisions"].items():
        if "error" in row:
            lines.append(f"  {name}: {row['error']}")
            continue
        state = "skipped (gradients not finite)" if row["skipped"] else "taken"
        lines.append(f"  {name}: loss {row['loss']}, step {state}")
    return "\n".join(lines)


def _finite(value: Any) -> Any:
    """NaN and infinities as null: the JSON object stays standard JSON."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
