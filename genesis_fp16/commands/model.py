"""`genesis-fp16 model list|promote|rollback|unpin AGENT`: which model Genesis is served.

``list`` shows the served model, the ones served before it (newest first) and every
candidate kept: its data fingerprint, records, precision, gate scores and time, and the
live watch's figures of a model once served (records scored since it was served, its
log-loss minus its predecessor's on them, with anytime-valid 95% bounds). A plugin
without a promotion gate (one that declares no ``score_records``; the built-in agents
all have one) serves its newest checkpoint: ``list`` shows it, and says that it has no
gate. ``promote AGENT ID`` serves a kept candidate
(the gate is bypassed: the operator decides); ``rollback AGENT`` serves the model served
before the current one. Both pin the served model: the daemon's gate then reports a
better candidate (verdict ``held``) instead of serving it, and never trains the same data
again to replace it, until ``unpin AGENT``. Both rewrite the pointer (``served.json`` in
the agent's checkpoint folder) atomically, under its lock: the prediction API and a
running daemon load the new model at their next load or run, and the choice survives a
restart. A pointer that is unusable (set aside as ``served.json.unusable-*``) is repaired by
either: ``promote`` from the candidate's own records, ``rollback`` from the old
pointer's history or else the newest candidate the gate promoted. ``--json`` prints one
JSON object; on failure (exit code 2) the CLI's ``{"error", "kind", "exit_code"}`` one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from genesis_fp16.cli import UsageError
from genesis_fp16.commands.model_list import list_models
from genesis_fp16.commands.named_agent import agent_folder
from genesis_fp16.config.agent_names import agent_argument
from genesis_fp16.config.plugins import known_agent_names
from genesis_fp16.config.settings_reading import load_settings_for_reading
from genesis_fp16.status.report import held_by_pin, held_words
from genesis_fp16_infrastructure.api import AgentFolder, ServedPointerError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "model",
        help="list, promote, roll back or unpin an agent's served model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in (
        ("list", "served, earlier and candidate models (newest checkpoint: no gate)"),
        ("promote", "serve a kept candidate by its id, and pin it"),
        ("rollback", "serve the model served before this one, and pin it"),
        ("unpin", "let the daemon's gate replace the served model again"),
    ):
        sub = actions.add_parser(action, help=text)
        sub.add_argument("agent", metavar="AGENT", type=agent_argument)
        if action == "promote":
            sub.add_argument("id", metavar="ID", help="a candidate id from `model list`")
        sub.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    agent, as_json = str(args.agent), bool(args.json)
    try:
        home = agent_folder(agent, read_only=args.action == "list")
        known = known_agent_names()
        if agent not in known and not home.root.exists():  # a typo, not an agent without state
            raise UsageError(f"unknown agent {agent!r}; known agents: {', '.join(known) or 'none'}")
        folder = home.checkpoint_dir
        if args.action == "list":
            # read as agent_folder read them (a refused .env's other lines), said once there
            idle = load_settings_for_reading().settings.live_watch_idle_seconds
            return list_models(folder, agent, as_json, idle)
        if not home.checkpoints.holds_models():
            raise UsageError(
                f"{agent}: no served-model pointer or candidate in {folder}: the agent has "
                "no promotion gate (it serves its newest checkpoint) or has trained nothing yet"
            )
        with contextlib.suppress(ServedPointerError):  # unusable: what the command repairs
            home.recover()  # what a writer killed midway left, settled first
        if args.action == "promote":
            answer = _promote(home, agent, str(args.id))
        elif args.action == "rollback":
            served, repaired = home.roll_back(by="model rollback")
            fixed = " (the unusable pointer is replaced)" if repaired else ""
            answer = {
                "agent": agent,
                "served": served.id,
                "pinned": True,
                "repaired": repaired,
                "message": f"{agent}: serving {served.id} again (rolled back, pinned){fixed}",
            }
        else:
            answer = _unpin(home, agent)
    except ServedPointerError as exc:
        # One line on stderr, exit 2; with --json the CLI's error object on stdout too.
        raise UsageError(f"{agent}: {exc}") from None
    print(json.dumps(answer, indent=2) if as_json else answer["message"])
    return 0


def _promote(home: AgentFolder, agent: str, ident: str) -> dict[str, Any]:
    models = home.checkpoints
    candidate, kept = models.candidates_dir / ident, models.candidates()
    if candidate not in kept:  # a kept candidate's folder, never a path beside them
        known = ", ".join(c.name for c in kept) or "none"
        raise UsageError(f"{agent}: no candidate {ident!r}; kept candidates: {known}")
    verdict = models.verdict(candidate)
    if verdict.outcome is None:
        raise UsageError(f"{agent}: candidate {ident!r} has not finished training")
    entry = models.served_entry(candidate)
    if entry is None:
        raise UsageError(f"{agent}: candidate {ident!r} holds no checkpoint")
    repaired = home.promote(entry, by="model promote")
    gate = verdict.gate_outcome or verdict.outcome
    fixed = "; the unusable pointer is replaced" if repaired else ""
    return {
        "agent": agent,
        "served": ident,
        "pinned": True,
        "repaired": repaired,
        "gate_verdict": gate,
        "message": f"{agent}: serving {ident} (promoted by hand and pinned; the gate's "
        f"verdict on it: {gate}){fixed}",
    }


def _unpin(home: AgentFolder, agent: str) -> dict[str, Any]:
    models = home.checkpoints
    before = models.repairable_pointer()  # the pin lifted: the candidates held while it stood
    pointer = home.unpin()
    if pointer is None:
        raise UsageError(f"{agent}: no model served: nothing to unpin")
    served = pointer.served.id
    pin = before.pinned.to_json() if before and before.pinned else None
    held = held_by_pin(models, pin, served)
    hint = (
        f"; {held_words(held)} (`genesis-fp16 model promote {agent} ID` serves one)" if held else ""
    )
    return {
        "agent": agent,
        "served": served,
        "pinned": False,
        "held": held,
        "message": f"{agent}: {served} served, not pinned: the daemon's "
        f"gate may replace it with a candidate of new data{hint}",
    }
