"""`genesis-fp16 replay BUNDLE [--against fp32] [--precision P] [--device D] [--json]`: run
a fault bundle's step again.

A fault bundle (``precision show AGENT`` lists them; ``train --json`` names one in
``fault_bundle``) holds one step that went non-finite and the state before it. Replay
runs that step again from that state and says whether it reproduced (the same
non-finite pattern and the same loss bits where the loss was finite), the first module
and phase (forward, backward, optimizer) where a value became non-finite, each module's
largest magnitudes, and what the same step gives in fp32, bf16 and fp16. With
``--against fp32`` it also runs the step in fp32 beside the bundle's precision, names
the first module and operation whose output leaves fp32 by more than ``--tolerance``
(with both values), and advises bf16, an fp32 exception for one module, or a lower
learning rate, saying why (docs/precision-forensics.md). Exit 0 when it ran
(reproduced or not), 2 for a bundle that cannot be used, in one line.

The step is rebuilt by the bundle's agent: its plugin's ``replay_task(context)``
(``context``: the bundle's agent and request, its ``rebuild`` record, the device), from
the model's construction arguments the bundle keeps (se_darwin, rlhf_ppo) or from the
request; the batches are the bundle's own. Nothing the bundle names is imported: its
batch types resolve against the plugin's ``batch_types``. When the data the run read is
gone or changed, the report says so in one line (``data``).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genesis_fp16.cli import UsageError, strict_json

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.api import PrecisionName

PRECISIONS = ("fp16", "bf16", "fp32")
DEFAULT_TOLERANCE = 0.1  # flight.replay.DEFAULT_TOLERANCE, without importing torch here


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
    parser.add_argument(
        "--against",
        choices=("fp32",),
        help="run the step in fp32 too, side by side: the first module and operation whose "
        "output leaves fp32, and what to change",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="with --against: a tensor departs when max|low - fp32| exceeds this share of "
        f"max|fp32| (default {DEFAULT_TOLERANCE})",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from genesis_fp16_infrastructure.api import BundleError, load_bundle

    if not 0 < args.tolerance < math.inf:
        raise UsageError(f"--tolerance {args.tolerance}: must be a positive number")
    against = args.tolerance if args.against == "fp32" else None
    try:
        bundle = load_bundle(Path(args.bundle))  # to the CPU: RNG states must stay there
        note = bundle.data_change()
        task, batch_types, note = _task(bundle, args.device or str(bundle["device"]), note)
        report = bundle.replay(task, batch_types, args.precision, args.device, against)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    except UsageError:
        raise
    except Exception as exc:  # a bundle is untrusted input: whatever it breaks is one line
        raise UsageError(f"{args.bundle}: cannot replay it ({_first_line(exc)})") from None
    report["data"] = note or "the run's data is unchanged"
    if args.json:
        print(json.dumps(strict_json(report)))
    else:
        print(describe(report))
    return 0


def _task(
    bundle: Mapping[str, Any], device: str, note: str | None
) -> tuple[Any, Sequence[type], str | None]:
    """What rebuilds the bundle's step, from its agent's plugin (its task and batch types),
    and the line on its data (``note``, the bundle's ``data_change``; None: unchanged).
    Only an allowlisted plugin's code runs; nothing the bundle names is imported (its
    batch types resolve against the plugin's ``batch_types``)."""
    from genesis_fp16.commands.reading import command_plugin, command_settings
    from genesis_fp16_infrastructure.api import BundleError, is_agent_name

    found = bundle.get("context")
    context: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    agent = context.get("agent")
    if not is_agent_name(agent):  # the one pattern (config/agent_names.py), no other
        raise BundleError("the bundle names no agent: replay it from the library with its task")
    # Replay reads (a refused .env: its other lines, said on stderr); its allowlist is
    # never wider than the file's (settings_reading.py).
    # What its plugin declares (plugin_api's ReplaysSteps and NamesBatchTypes), as loaded.
    _, declared = command_plugin(str(agent), command_settings("replay"))  # a name: checked above
    make_task = declared.replay_task
    if make_task is None:
        raise UsageError(
            f"agent {agent!r} cannot rebuild a bundle's step: its plugin has no replay_task "
            "(genesis-fp16 check-agent says so too)"
        )
    try:
        task = make_task({**context, "rebuild": bundle.get("rebuild"), "device": device})
    except Exception as exc:  # the plugin's own refusal (no data, no model record): one line
        where = f"; {note}" if note else ""
        raise UsageError(
            f"agent {agent!r} cannot rebuild the bundle's step: {_first_line(exc)}{where}"
        ) from None
    if note:
        note += f": replaying from the {len(bundle['batches'])} batch(es) the bundle holds"
    return task, declared.batch_types, note


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return first[:240]


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
    if "against_fp32" in report:
        lines.extend(_against_lines(report["against_fp32"], replayed["precision"]))
    lines.append(f"data: {report['data']}")
    return "\n".join(lines)


def _against_lines(against: Mapping[str, Any], precision: PrecisionName) -> list[str]:
    """--against fp32: where the low precision leaves fp32, each module side by side, advice."""
    first = against["first_departure"]
    tolerance = against["tolerance"]
    lines = [
        f"against fp32 (a tensor departs: not finite, or max|diff| > {tolerance:g} x max|fp32|):"
    ]
    if first is None:
        lines.append(f"  {precision} stays within the tolerance of fp32 everywhere")
    else:
        lines.append(
            f"  first departure: module {first['module']}, {first['phase']} ({first['tensor']}): "
            f"{precision} {first['low']:.6g}, fp32 {first['fp32']:.6g} ({first['kind']})"
        )
    lines.append(f"  largest |forward output|      {precision:>12} {'fp32':>12}")
    for name, fp32 in against["forward_max"]["fp32"].items():
        low = against["forward_max"]["low"].get(name, float("nan"))
        lines.append(f"    {name:<28}{low:>12.4g} {fp32:>12.4g}")
    advice = against["advice"]
    lines.append(f"advice: {advice['action']}: {advice['why']}")
    return lines
