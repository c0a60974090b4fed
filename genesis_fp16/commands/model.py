"""`genesis-fp16 model list|promote|rollback AGENT`: which model Genesis is served.

``list`` shows the served model, the ones served before it (newest first) and every
candidate kept: its data fingerprint, records, precision, gate scores and time, and the
live watch's figures of a model once served (records scored since it was served, its
log-loss minus its predecessor's on them, with anytime-valid 95% bounds).
``promote AGENT ID`` serves a kept candidate (the gate is bypassed: the operator
decides); ``rollback AGENT`` serves the model served before the current one. Both
rewrite the pointer (``served.json`` in the agent's checkpoint folder) atomically: the
prediction API and a running daemon load the new model at their next load or run, and
the choice survives a restart. The same data does not train a rolled-back model again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from genesis_fp16.agent_state import agent_paths
from genesis_fp16.cli import UsageError
from genesis_fp16_infrastructure.served import (
    CANDIDATE_META,
    VERDICT_NAME,
    ServedPointerError,
    candidate_entry,
    candidates_dir,
    list_candidates,
    newest_checkpoint,
    read_json,
    read_pointer,
    rollback,
    serve,
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "model", help="list, promote or roll back an agent's served model", description=__doc__
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="served, earlier and candidate models")
    listing.add_argument("agent", metavar="AGENT")
    listing.add_argument("--json", action="store_true", help="print JSON")
    promote = actions.add_parser("promote", help="serve a kept candidate by its id")
    promote.add_argument("agent", metavar="AGENT")
    promote.add_argument("id", metavar="ID", help="a candidate id from `model list`")
    back = actions.add_parser("rollback", help="serve the model served before this one")
    back.add_argument("agent", metavar="AGENT")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    agent = str(args.agent)
    folder = agent_paths(agent).checkpoint_dir
    try:
        if args.action == "list":
            return _list(folder, agent, bool(args.json))
        if args.action == "promote":
            return _promote(folder, agent, str(args.id))
        served = rollback(folder)
    except ServedPointerError as exc:
        raise UsageError(str(exc)) from None
    print(f"{agent}: serving {served['id']} again (rolled back)")
    return 0


def _promote(folder: Path, agent: str, ident: str) -> int:
    candidate = candidates_dir(folder) / ident
    if "/" in ident or not (candidate / CANDIDATE_META).is_file():
        known = ", ".join(c.name for c in list_candidates(folder)) or "none"
        raise UsageError(f"{agent}: no candidate {ident!r}; kept candidates: {known}")
    verdict = read_json(candidate / VERDICT_NAME)
    if verdict is None:
        raise UsageError(f"{agent}: candidate {ident!r} has not finished training")
    checkpoint = newest_checkpoint(candidate)
    if checkpoint is None:
        raise UsageError(f"{agent}: candidate {ident!r} holds no checkpoint")
    entry = candidate_entry(folder, candidate, checkpoint)
    split = newest_checkpoint(candidate / "split") if (candidate / "split").is_dir() else None
    if split is not None:  # final_fit=whole: the gate judges the split run's model
        entry["judged"] = str(split.resolve().relative_to(folder.resolve()))
    serve(folder, entry, "manual")
    print(f"{agent}: serving {ident} (promoted by hand; gate verdict was {verdict.get('outcome')})")
    return 0


def _list(folder: Path, agent: str, as_json: bool) -> int:
    pointer = read_pointer(folder)
    served_id = pointer.served.get("id") if pointer else None
    earlier = [h.get("id") for h in pointer.history] if pointer else []
    live = (
        {e.get("id"): e.get("live") for e in [pointer.served, *pointer.history]} if pointer else {}
    )
    rows = []
    for candidate in reversed(list_candidates(folder)):
        meta = read_json(candidate / CANDIDATE_META) or {}
        verdict = read_json(candidate / VERDICT_NAME) or {}
        scores = verdict.get("candidate") or {}
        rows.append(
            {
                "id": candidate.name,
                "served": candidate.name == served_id,
                "previous": earlier.index(candidate.name) + 1
                if candidate.name in earlier
                else None,
                "verdict": verdict.get("outcome", "training"),
                "fingerprint": meta.get("fingerprint"),
                "records": meta.get("records"),
                "precision": verdict.get("precision"),
                "auc": scores.get("auc"),
                "log_loss": scores.get("log_loss"),
                "trained_at": meta.get("created_at"),
                "reason": verdict.get("reason"),
                # The live watch's figures: the pointer's, or a rolled-back one's verdict's
                "live": live.get(candidate.name) or verdict.get("live"),
            }
        )
    if as_json:
        print(json.dumps({"agent": agent, "served": served_id, "models": rows}, indent=2))
        return 0
    if not rows:
        print(f"{agent}: no model trained yet ({folder})")
        return 0
    print(
        f"{'ID':<28} {'STATE':<12} {'RECORDS':>7} {'PREC':<5} {'AUC':>6} {'LOGLOSS':>7}  "
        f"{'TRAINED':<20}  LIVE"
    )
    for row in rows:
        state = (
            "SERVED"
            if row["served"]
            else f"previous-{row['previous']}"
            if row["previous"]
            else row["verdict"]
        )
        print(
            f"{row['id']:<28} {state:<12} {row['records'] or '-':>7} {row['precision'] or '-':<5} "
            f"{_num(row['auc']):>6} {_num(row['log_loss']):>7}  {row['trained_at'] or '-':<20}  "
            f"{_live(row['live'])}"
        )
    return 0


def _live(figures: Any) -> str:
    """The live watch's figures in one cell: records, log-loss difference from the
    predecessor and its bounds, and the verdict when the test found a regression."""
    if not isinstance(figures, dict) or not figures.get("records"):
        return "-"
    text = (
        f"{figures['records']} rec, log-loss {figures['difference']:+.3f} "
        f"[{figures['lower']:+.3f}, {figures['upper']:+.3f}] vs previous"
    )
    return text + (" REGRESSION" if figures.get("regression") else "")


def _num(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3f}"
