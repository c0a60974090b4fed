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
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genesis_fp16.cli import UsageError
from genesis_fp16.commands.reading import agent_folder, command_settings
from genesis_fp16.config.agent_names import agent_argument
from genesis_fp16.metrics.watch_state import watch_state
from genesis_fp16.status.report import held_by_pin, held_words
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    CheckpointsFolder,
    LiveMark,
    LiveReport,
    Outcome,
    ScoresOn,
    ServedPointer,
    ServedPointerError,
    UnusableStateFile,
)


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
        settings = command_settings(f"model {args.action}")
        home = agent_folder(agent, settings)
        folder = home.checkpoint_dir
        if args.action == "list":
            return list_models(folder, agent, as_json, settings.live_watch_idle_seconds)
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
    held = held_by_pin(models, before)  # its pin and served model: unpin changes only the pin
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


# The table's header (the docs' samples show it: tests/test_doc_claims.py compares them).
HEADER = (
    f"{'ID':<28} {'STATE':<12} {'RECORDS':>7} {'PREC':<5} {'SCORES':<36}  {'ON':<14}  "
    f"{'GATE':<26}  {'TRAINED':<20}  LIVE"
)


def list_models(folder: Path, agent: str, as_json: bool, idle_seconds: float = 86400.0) -> int:
    """``model list``: with a promotion gate, a row per candidate, with its state
    (``SERVED``, ``pinned``, ``previous-N``, or the gate's verdict), records, precision,
    scores (each gated loss column's mean, the primary first, then what is reported beside
    them: se_darwin's ``log_loss``, ``brier`` and ``auc``) and time, an unusable pointer
    said in one line above the rows with the command that repairs it; without a gate,
    one row: the newest checkpoint."""
    models = CheckpointsFolder(folder)
    if not models.holds_models():
        return _list_ungated(models, agent, as_json)
    try:
        models.served_checkpoint()
        pointer, unusable = models.repairable_pointer(), None
    except ServedPointerError as exc:
        pointer, unusable = None, str(exc)
    rows = _rows(models, pointer)
    # The served model's watch: watched or not (why), its segments' figures
    watched = None if pointer is None else watch_state(pointer, idle_seconds, time.time())
    pin = pointer.pinned.to_json() if pointer and pointer.pinned else None
    held = held_by_pin(models, pointer)
    if as_json:
        answer = {
            "agent": agent,
            "gate": True,
            "served": pointer.served.id if pointer else None,
            "pinned": pin,
            "held": held,
            "pointer_error": unusable,
            "watch": watched,
            "models": rows,
        }
        print(json.dumps(answer, indent=2))
        return 0
    if unusable is not None:
        print(
            f"{agent}: the served-model pointer is unusable, nothing is served: {unusable}".replace(
                "AGENT", agent
            )
        )
    elif pointer is not None and pointer.pinned is not None:
        print(_pin_line(agent, pointer, held))
    if not rows:
        print(f"{agent}: no model trained yet ({folder})")
        return 0
    print(HEADER)
    for row in rows:
        print(
            f"{row['id']:<28} {row['state']:<12} {row['records'] or '-':>7} "
            f"{row['precision'] or '-':<5} {_scores(row):<36}  {_on(row):<14}  {_gate(row):<26}  "
            f"{row['trained_at'] or '-':<20}  {_live(row['live'])}"
        )
    for line in _watch_lines(agent, watched):
        print(line)
    return 0


def _pin_line(agent: str, pointer: ServedPointer, held: list[str]) -> str:
    """The pin above the table: the pinned model, by what and when, and the candidates
    the gate held since (named only when there are some)."""
    by, at = (pointer.pinned.by, pointer.pinned.at) if pointer.pinned else (None, None)
    said = f"{agent}: {pointer.served.id} pinned by `{by}` at {at}"
    if held:
        serve = f"`genesis-fp16 model promote {agent} ID` serves one, "
    else:
        serve = "the gate holds a better candidate instead of serving it; "
    return f"{said}: {held_words(held)} ({serve}`genesis-fp16 model unpin {agent}` lifts the pin)"


def _watch_lines(agent: str, watched: dict[str, Any] | None) -> list[str]:
    """The watch below the table: not watched (why), and each segment's figures."""
    if watched is None:
        return []
    lines = []
    if watched["state"] != "watching":
        lines.append(f"{agent}: the served model is NOT WATCHED: {watched['reason']}")
    for seg in watched.get("segments") or []:
        if isinstance(seg, dict) and seg.get("records"):
            flag = " REGRESSION" if seg.get("regression") else ""
            lines.append(
                f"  watch segment {seg.get('name')}: {seg['records']} rec, "
                f"{seg.get('difference') or 0:+.3f} [{seg.get('lower', 0):+.3f}, "
                f"{seg.get('upper', 0):+.3f}], evidence {seg.get('evidence')}{flag}"
            )
    test = watched.get("self_test")
    if isinstance(test, dict):
        lines.append(
            f"  watch self-test: {test.get('false_rollbacks')} false rollbacks in "
            f"{test.get('replays')} A/A replays, rate {test.get('rate')} "
            f"[{test.get('lower')}, {test.get('upper')}]"
        )
    return lines


def _rows(models: CheckpointsFolder, pointer: ServedPointer | None) -> list[dict[str, Any]]:
    served_id = pointer.served.id if pointer else None
    how = pointer.served.how if pointer else None
    earlier = [h.id for h in pointer.history] if pointer else []
    entries = [pointer.served, *pointer.history] if pointer else []
    live = {e.id: _live_json(e.live, e.kept("live")) for e in entries}
    rows = []
    for candidate in reversed(models.candidates()):
        meta, verdict = models.meta(candidate), models.verdict(candidate)
        scores = verdict.candidate or ScoresOn("-")  # none, or unreadable
        outcome = verdict.outcome or "training"
        served = candidate.name == served_id
        previous = earlier.index(candidate.name) + 1 if candidate.name in earlier else None
        if served:
            state = "SERVED" if pointer is None or pointer.pinned is None else "SERVED,pinned"
        elif previous is not None:
            state = f"previous-{previous}"
        else:
            state = outcome
        rows.append(
            {
                "id": candidate.name,
                "state": state,
                "served": served,
                "how": how if served else None,  # first, gate, manual, rollback
                "previous": previous,
                "verdict": outcome,
                "gate_verdict": verdict.gate_outcome or outcome,
                "fingerprint": meta.fingerprint,
                # the first model's meta cannot know them: its verdict's scores count them
                "records": meta.records if meta.records is not None else scores.records,
                "precision": verdict.precision,
                # each gated loss column's mean (the primary first); reported beside: AUC
                "losses": {k: v for k, v in scores.figures().items() if k in scores.losses},
                # The records those scores are on: two models' scores compare only on the
                # same set (a first model's on current, a promoted one's on held_out).
                "scores_set": None if scores.name == "-" else scores.name,
                "scores_records": scores.records,
                "reported": dict(scores.reported),
                "trained_at": meta.created_at,
                "reason": verdict.reason,
                # Issue 62: an inconclusive one's records needed, and the sets or segments
                # (se_darwin: Genesis agents) that were shown worse or left undecided.
                "records_needed": verdict.records_needed,
                # Issue 68: judged on held-out records, or on the plugin's training data
                "evidence": verdict.evidence,
                "deciding": _deciding(verdict.comparisons),
                # The live watch's figures: the pointer's, or a rolled-back one's verdict's
                "live": live.get(candidate.name) or _live_json(verdict.live, verdict.kept("live")),
            }
        )
    return rows


def _deciding(comparisons: Sequence[Any]) -> list[str]:
    """The sets (``set:segment`` for a segment) whose finding decided a verdict that is
    not a promotion: those shown worse, else those left inconclusive. ``comparisons``:
    the verdict's, each a GateComparison."""
    found: dict[str, list[str]] = {"worse": [], "inconclusive": []}
    for c in comparisons:
        if c.finding in found:
            name = f"{c.name}:{c.segment}" if c.segment else c.name
            found[c.finding].append(name)
    return found["worse"] or found["inconclusive"]


def _live_json(report: LiveReport | None, kept: Any) -> Any:
    """A pointer entry's or a verdict's live figures as its file keeps them (``kept``: a
    hand's edit the report cannot read, as read); None: none."""
    return report.figures_json() if report is not None else kept


def _gate(row: dict[str, Any]) -> str:
    """The gate's verdict in a few words: an inconclusive one with the records it needs,
    a rejected one with the set or segment that was worse; "(on training data)" when it
    stands on records the candidate may have trained on (issue 68)."""
    verdict = str(row.get("gate_verdict") or "-")
    text = verdict
    if verdict == Outcome.INCONCLUSIVE and row.get("records_needed"):
        text = f"{verdict}, needs {row['records_needed']}"
    elif verdict == Outcome.REJECTED and row.get("deciding"):
        text = f"rejected: {','.join(row['deciding'])}"
    if row.get("evidence") == "training_data":
        text += " (on training data)"
    return text


def _live(figures: Any) -> str:
    """The live watch's figures in one cell: records, the primary loss column's difference
    from the predecessor and its bounds, and the verdict when a column's test found a
    regression, naming the columns; ``-`` where the figures are missing or not numbers (a
    hand's edit of the pointer)."""
    live = LiveMark.of(figures if isinstance(figures, dict) else {})
    w = live.watched
    if not live.records or None in (live.primary, w.difference, w.lower, w.upper):
        return "-"
    text = (
        f"{live.records} rec, {live.primary} {w.difference:+.3f} "
        f"[{w.lower:+.3f}, {w.upper:+.3f}] vs previous"
    )
    said = f"; {', '.join(live.regressed)}" if live.regressed else ""
    return text + (f"{said} REGRESSION" if live.regression else "")


def _list_ungated(models: CheckpointsFolder, agent: str, as_json: bool) -> int:
    """An agent without a promotion gate: its newest checkpoint is what it serves."""
    folder = models.path
    try:
        newest = models.newest_checkpoint() if folder.is_dir() else None
    except OSError:
        newest = None
    row: dict[str, Any] | None = None
    if newest is not None:
        summary = models.summary(newest) or {}
        row = {
            "checkpoint": newest.name,
            "step": summary.get("step"),
            "precision": summary.get("precision"),
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(newest.stat().st_mtime)),
            "eval": _last_eval(folder.parent),
        }
    if as_json:
        print(json.dumps({"agent": agent, "gate": False, "newest": row}, indent=2))
        return 0
    if row is None:
        print(f"{agent}: no checkpoint yet ({folder}); it has no promotion gate")
        return 0
    evaluated = ", ".join(f"{k} {float(v):.3f}" for k, v in (row["eval"] or {}).items()) or "-"
    print(
        f"{agent}: no promotion gate: serves its newest checkpoint {row['checkpoint']} "
        f"(step {row['step']}, {row['precision'] or '-'}, written {row['written_at']}, "
        f"eval {evaluated})"
    )
    return 0


def _last_eval(agent_root: Path) -> dict[str, Any] | None:
    """The eval figures the agent's last run reported (``last_run.json``), if it kept any."""
    try:
        record = AgentFolder.at(agent_root).last_run()
    except UnusableStateFile:  # not a record: no figures
        return None
    # The record's read checked them: a map of numbers, each a float.
    return None if record is None else record.eval or None


def _on(row: dict[str, Any]) -> str:
    """The ON cell: the set the scores are on and its records (``held_out 495``)."""
    if row["scores_set"] is None:
        return "-"
    records = "" if row["scores_records"] is None else f" {row['scores_records']}"
    return f"{row['scores_set']}{records}"


def _scores(row: dict[str, Any]) -> str:
    """The SCORES cell: each figure as ``name value``, the primary loss first; ``-``: none."""
    figures = {**row["losses"], **row["reported"]}
    return " ".join(f"{name} {value:.3f}" for name, value in figures.items()) or "-"
