"""`genesis-fp16 precision show|reset AGENT`: what an agent's precision rests on.

``show`` prints the precision guard's remembered demotion, when ``auto`` was measured
the timing table and the choice (with what it cost, and why it replaced the one kept
before: the key fields that changed, each with both values), or that the kept file is
another release's, then what the next ``auto`` run will do with it and why, the captured
step's verdicts against eager, and the loss scale carried to the next fp16 run, and the
flight recorder's fault bundles.
``reset`` forgets them all but the bundles (evidence, bounded by their own folder), so
the agent's next run (in a running daemon too: both are read at the start of every
run) asks for its configured precision and, for ``auto``, measures again.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, TypeVar

from genesis_fp16.cli import UsageError
from genesis_fp16.commands.reading import agent_folder, command_settings
from genesis_fp16.config.agent_names import agent_argument
from genesis_fp16.jobs.guard_state import describe
from genesis_fp16_infrastructure.api import AgentFolder, SetAside

T = TypeVar("T")
# Torch-free: the calibration is read as the record the owner types, without torch.
_NOT_MEASURED = "no measurement of 'auto' cached (it is timed at the next auto run)"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "precision",
        help="show or reset an agent's remembered precision demotion",
        description=__doc__,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in (
        ("show", "print the demotion, 'auto' measurement, verdicts, carried scale, bundles"),
        ("reset", "forget them all"),
    ):
        sub = actions.add_parser(action, help=text)
        sub.add_argument(
            "agent", metavar="AGENT", type=agent_argument, help="the agent's name, e.g. se_darwin"
        )
        what = "the state files' JSON" if action == "show" else "what was forgotten, as JSON"
        sub.add_argument("--json", action="store_true", help=f"print {what}")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    agent = str(args.agent)
    # show reads (a refused .env: its other lines, said on stderr); reset acts: it refuses
    folder = agent_folder(agent, command_settings(f"precision {args.action}"))
    if args.action == "show":
        return _show(args, agent, folder)
    # A running daemon may be recording a run's demotions into the same file: take turns.
    with folder.precision_memory_locked():
        return _reset(args, agent, folder)


def _show(args: argparse.Namespace, agent: str, folder: AgentFolder) -> int:
    # The kept measurement and verdicts, read by the agent folder's owner as the run reads
    # them; a problem: why the file was unusable (set aside; the next run does it again).
    calibration, problem = _read_kept(folder.calibration, "the next auto run measures again")
    shown_calibration = {"error": problem} if problem else calibration and calibration.to_json()
    # Another release's file is read by neither: said as such, and kept.
    other = folder.calibration_of_another_release() if calibration is None else None
    try:
        memory = folder.precision_memory()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    kept, unverified = _read_kept(folder.capture_verdicts, "the next captured run verifies again")
    verdicts = [{"error": unverified}] if unverified else [v.to_json() for v in kept.values()]
    carried = folder.carried_scale()
    # What this host can measure, asked only when nothing is cached (it imports torch).
    host = _host() if (calibration is None and problem is None) or not verdicts else None
    bundles = folder.fault_bundles()
    if calibration is not None:
        next_run = calibration.next_run()
    elif other is not None:
        next_run = other.next_run()
    else:
        next_run = _next_run_without_record(problem, host)
    if memory is not None:
        next_run += (
            f"; the remembered demotion then raises a pick less robust than "
            f"{memory.demoted_to} to {memory.demoted_to}"
        )
    if args.json:
        shown = {
            "host": host,
            "demotion": memory.to_json() if memory else None,
            "calibration": shown_calibration,
            "calibration_of_another_release": other and other.to_json(),
            "next_auto_run": next_run,
            "captured_step_verdicts": verdicts,
            "carried_loss_scale": None if carried is None else carried.__dict__,
            "fault_bundles": bundles,
        }
        print(json.dumps(shown, indent=2))
    else:
        print(describe(memory) or f"{agent}: no precision demotion remembered")
        table = None if calibration is None else calibration.table()
        said = f"auto: {other.describe()}" if other is not None else None
        print(_describe_calibration(problem or table or said, host))
        print(next_run)
        print(_describe_verdicts(verdicts, host))
        if carried is None:
            print("loss scale: none carried (the next fp16 run starts at its initial scale)")
        else:
            print(
                f"loss scale: {carried.scale:g} carried from the last fp16 run ({carried.at}), "
                f"for runs asking {carried.requested}"
            )
        print(_describe_bundles(bundles))
    return 0


def _describe_bundles(bundles: list[dict[str, Any]]) -> str:
    if not bundles:
        return "fault bundles: none"
    lines = [f"fault bundles ({len(bundles)}, oldest first; `genesis-fp16 replay PATH`):"]
    lines += [
        f"  step {b['step']} {b['reason']}: {b['path']} ({b['bytes']} bytes)" for b in bundles
    ]
    return "\n".join(lines)


def _reset(args: argparse.Namespace, agent: str, folder: AgentFolder) -> int:
    path = folder.precision_state_path
    try:
        memory = folder.precision_memory()
    except ValueError:
        memory = None  # a broken file is reset all the same
    forgot: dict[str, Any] = {"calibration": False, "carried_loss_scale": False}
    said = []
    if folder.calibration_path.exists():
        folder.calibration_path.unlink()
        forgot["calibration"] = True
        said.append(f"{agent}: measurement of 'auto' forgotten; the next auto run measures again")
    if folder.carried_scale() is not None:
        forgot["carried_loss_scale"] = True
        said.append(
            f"{agent}: carried loss scale forgotten; the next fp16 run starts at its initial scale"
        )
    folder.save_carried_scale(None)
    forgot["captured_step_verdicts"] = folder.verification_path.exists()
    if forgot["captured_step_verdicts"]:
        folder.verification_path.unlink()
        said.append(
            f"{agent}: captured-step verdicts forgotten; the next captured run verifies again"
        )
    forgot["demotion"] = memory.to_json() if memory else None
    if not path.exists():
        said.append(f"{agent}: no precision demotion remembered ({path})")
    else:
        folder.save_precision_memory(None)
        was = f" (was {memory.demoted_from} -> {memory.demoted_to})" if memory else ""
        said.append(
            f"{agent}: precision demotion cleared{was}; the next run uses the configured precision"
        )
    if args.json:
        print(json.dumps({"agent": agent, "forgot": forgot}))
    else:
        print("\n".join(said))
    return 0


def _host() -> dict[str, bool]:
    """Whether this host has a CUDA device, and its CPU native bf16 or fp16: what a
    measured ``auto`` and a captured step need."""
    import torch

    from genesis_fp16_infrastructure.api import cpu_capabilities

    cpu = cpu_capabilities()
    return {
        "cuda": torch.cuda.is_available(),
        "cpu_native_bf16": cpu.native_bf16,
        "cpu_native_fp16": cpu.native_fp16,
    }


def _describe_calibration(shown: str | None, host: dict[str, bool] | None) -> str:
    """The kept measurement's table (or why its file was unusable), else why there is none."""
    if shown is not None:
        return shown
    if host is not None and not any(host.values()):
        return (
            "auto: nothing to measure on this host (no CUDA device, and its CPU runs "
            "only fp32 natively): auto runs fp32"
        )
    return _NOT_MEASURED


def _next_run_without_record(problem: str | None, host: dict[str, bool] | None) -> str:
    """What the next ``auto`` run does with no measurement kept, and why."""
    if problem is not None:
        return "next auto run: measures again (the kept file was unusable, set aside)"
    if host is not None and not any(host.values()):
        return "next auto run: times nothing and runs fp32 (the only native precision here)"
    return "next auto run: measures (no measurement kept)"


def _read_kept(read: Callable[[Callable[[SetAside], None]], T], then: str) -> tuple[T, str | None]:
    """What ``read`` reads of the agent folder's kept records, and why its file was
    unusable (set aside: ``then`` says what happens next); None: it was usable, or absent."""
    unusable: list[SetAside] = []
    kept = read(unusable.append)
    return kept, f"{unusable[0].why}; set aside, {then}" if unusable else None


def _describe_verdicts(verdicts: list[dict[str, Any]], host: dict[str, bool] | None) -> str:
    if not verdicts:
        if host is not None and not host["cuda"]:
            return "captured step: none here (CUDA graphs need a CUDA device; runs here are eager)"
        return "captured step: not verified on this host yet (the first captured run does it)"
    lines = []
    for v in verdicts:
        if "error" in v:
            lines.append(str(v["error"]))
            continue
        key = v.get("key", {})
        what = "trusted" if v.get("passed") else "NOT trusted, runs eager"
        lines.append(
            f"captured step {key.get('precision')} {key.get('execution')} on "
            f"{key.get('device')}, torch {key.get('torch')}: {what} ({v.get('detail')})"
        )
    return "\n".join(lines)
