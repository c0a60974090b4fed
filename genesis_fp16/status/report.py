"""The status of a state folder as one typed record: the daemon, then each agent's served
model, last run and next run. ``genesis-fp16 status`` (text and ``--json``) and the page
at ``/`` are both drawn from a :class:`StatusReport`, so the two cannot disagree::

    report = gather_status(Path("state"), ["se_darwin"], daemon_not_running(), no_schedule)
    report.to_json()["agents"][0]["served"]["id"]  # the served candidate, or no "served"

Everything is read from the state folder (the served-model pointer, ``last_run.json``,
``last_success.json``); only the daemon part and the next runs come from the caller: the
daemon knows its own health and schedule, a command without a daemon says so. Each file
is read bounded and as a regular file only, so a FIFO or a huge file in the state folder
costs a line in the report, never a hung page.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from genesis_fp16 import __version__
from genesis_fp16.metrics.watch_state import live_figures, stamp_seconds, watch_state
from genesis_fp16.status.history import AgentHistory, gather_history
from genesis_fp16.status.when import clock
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    CheckpointsFolder,
    LastRun,
    Outcome,
    PrecisionName,
    ServedPointer,
    UnusableStateFile,
    precision_name,
)

# Bounds that keep the page small whatever the state folder holds.
MAX_AGENTS = 100
MAX_FIGURES = 12
MAX_HELD = 8  # the held candidates a line names
TEXT_CHARS = 200


@dataclass(frozen=True)
class DaemonStatus:
    """Whether a daemon owns the state folder, and if so its pid, start, uptime and health.

    ``owner``: what holds the folder's lock (``serve``, ``train se_darwin``), None when
    nothing does. ``health``: the ``/healthz`` line, or why it is not known.
    ``reload_refused_at``: since when the daemon refuses its ``.env`` file (the first
    refused reload of a row; None: the last reload succeeded), ``reload_error`` why.
    ``rollback``: the rollback switch (``ENABLE_FP16_TRAINING=false``) in the daemon's
    settings, from the reload that turned it on: what it asks (None: off).
    """

    running: bool
    pid: int | None
    owner: str | None
    started_at: float | None
    uptime_seconds: float | None
    healthy: bool | None
    health: str
    ready: str | None = None
    reload_refused_at: float | None = None
    reload_error: str | None = None
    rollback: str | None = None


@dataclass(frozen=True)
class ServedModel:
    """The served-model pointer's entry: id, precision, how it came to be served and when,
    its quality figures (the gate's scores), the live watch's figures where the pointer
    keeps them, and whether it is pinned. ``error``: the pointer could not be read."""

    id: str | None = None
    precision: PrecisionName | None = None
    how: str | None = None
    served_at: str | None = None
    quality: dict[str, Any] | None = None
    live: dict[str, Any] | None = None
    pinned: str | None = None
    error: str | None = None
    # The candidates the gate held while the pin stands (:func:`held_by_pin`)
    held: tuple[str, ...] = ()
    # The live watch: watched or not (state, reason, since, limit: metrics.watch_state)
    watch: dict[str, Any] | None = None
    # Issue 62: the newest candidate kept inconclusive (judged again as records arrive)
    judging: str | None = None
    # Issue 68: the gate judged it on records it may have trained on (its verdict's
    # evidence ``training_data``), in words; None: on held-out records, or not known
    evidence: str | None = None


@dataclass(frozen=True)
class NextRun:
    """When the agent's next run is due (Unix time; None: not scheduled) and what that
    means: ``scheduled``, ``running now``, ``disabled``, or why nothing is known."""

    at: float | None
    note: str


@dataclass(frozen=True)
class AgentStatus:
    """One agent: ``installed`` (a plugin of that name is installed and allowed), its
    served model (None: none served yet), last run (None: none recorded), last success
    time, next run, the state files that could not be read, and its recent past (the
    runs, the served model's changes: :mod:`genesis_fp16.status.history`)."""

    name: str
    installed: bool
    served: ServedModel | None
    last_run: LastRun | None
    last_success_at: float | None
    next_run: NextRun
    problems: tuple[str, ...] = ()
    history: AgentHistory = field(default_factory=AgentHistory)


@dataclass(frozen=True)
class StatusReport:
    """The whole status, as ``status --json`` prints it and ``/status.json`` serves it."""

    version: str
    generated_at: float
    state_dir: str
    daemon: DaemonStatus
    agents: tuple[AgentStatus, ...]
    agents_not_shown: int = 0

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = msgspec.to_builtins(self)
        return result

    @classmethod
    def from_json(cls, data: Any) -> StatusReport:
        """The report a daemon served; ``msgspec.ValidationError`` names a wrong field."""
        return msgspec.convert(data, cls)


Schedule = Callable[[str], NextRun]


def gather_status(
    state_dir: Path,
    installed: Iterable[str],
    daemon: DaemonStatus,
    schedule: Schedule,
    now: float | None = None,
    idle_seconds: float = 86400.0,
) -> StatusReport:
    """The report for ``state_dir``: every installed agent and every agent with a folder
    there (a model outlives its plugin), at most :data:`MAX_AGENTS` of them."""
    installed = set(installed)
    names = sorted(installed | {folder.agent for folder in AgentFolder.each(state_dir)})
    shown = names[:MAX_AGENTS]
    agents = tuple(
        gather_agent(state_dir, name, name in installed, schedule(name), idle_seconds)
        for name in shown
    )
    return StatusReport(
        version=__version__,
        generated_at=time.time() if now is None else now,
        state_dir=str(state_dir),
        daemon=daemon,
        agents=agents,
        agents_not_shown=len(names) - len(shown),
    )


def gather_agent(
    state_dir: Path, name: str, installed: bool, next_run: NextRun, idle_seconds: float = 86400.0
) -> AgentStatus:
    """One agent's part of the report, from its folder under ``state_dir``."""
    folder = AgentFolder(state_dir, name)
    problems: list[str] = []
    try:
        last_run = folder.last_run()
    except UnusableStateFile as exc:  # not a record: said, the page goes on
        last_run, problems = None, [*problems, str(exc)]
    try:
        last_success = folder.last_success()
    except UnusableStateFile as exc:
        last_success, problems = None, [*problems, str(exc)]
    served, pointer = read_served(folder, idle_seconds)
    history, more = gather_history(folder, pointer)
    return AgentStatus(
        name=_cut(name),
        installed=installed,
        served=served,
        last_run=last_run,
        last_success_at=last_success,
        next_run=next_run,
        problems=tuple(_cut(p) for p in [*problems, *more]),
        history=history,
    )


def read_served(
    folder: AgentFolder, idle_seconds: float = 86400.0
) -> tuple[ServedModel | None, ServedPointer | None]:
    """The served-model pointer's entry (None: no pointer, nothing served yet), and the
    pointer as read (None: none, or unusable) for the agent's history. A pointer the
    daemon's typed reading refuses (a hand's edit, another version) is an error naming
    why, as the daemon refuses it: its fields are no model the daemon serves."""
    models = folder.checkpoints
    try:
        # A look: the daemon sets an unusable pointer aside, not this page.
        data = models.pointer_json()
        if data is None and models.aside_path.exists():
            error = _cut(f"served-model pointer unusable, set aside: {models.repair_hint()}")
            return ServedModel(error=error), None
        if data is None:
            return _newest_checkpoint(folder), None
        pointer = ServedPointer.from_json(data)
    except UnusableStateFile as exc:
        return ServedModel(error=_cut(f"served-model pointer unreadable: {exc}")), None
    except ValueError as exc:  # as ServedPointerError says it (agent_folder.pointer)
        error = f"served-model pointer unusable: {exc}; {models.repair_hint()}"
        return ServedModel(error=_cut(error)), None
    return _served_entry(models, pointer, idle_seconds), pointer


def _served_entry(
    models: CheckpointsFolder, pointer: ServedPointer, idle_seconds: float
) -> ServedModel:
    """The pointer's served entry, its fields cut to a line each."""
    served, held = pointer.served, held_by_pin(models, pointer)
    return ServedModel(
        id=_text(served.id),
        precision=served.precision,
        how=_text(served.how),
        served_at=_text(served.served_at),
        quality=_quality(pointer),
        live=_figures(live_figures(served.live) or served.kept("live")),
        pinned=None if pointer.pinned is None else _describe_pin(pointer, held),
        held=tuple(held),
        watch=watch_state(pointer, idle_seconds, time.time()),
        judging=_kept_inconclusive(models),
        evidence=_on_training_data(models, served.id),
    )


def _on_training_data(models: CheckpointsFolder, served_id: Any) -> str | None:
    """Why the served model's verdict does not stand on held-out records, when it does
    not (issue 68: a plugin whose candidate names no records it trained on)."""
    if not isinstance(served_id, str) or not served_id or "/" in served_id:
        return None
    try:
        verdict = models.verdict(models.candidates_dir / served_id)
    except OSError:
        return None
    if verdict.evidence != "training_data":
        return None
    return "judged on its training data: the plugin names no records it trained on"


def watch_words(watch: Mapping[str, Any] | None) -> str:
    """The watch state (:attr:`ServedModel.watch`) in words: the page's watch row and its
    watch chart both say these, so they cannot disagree."""
    if watch is None:
        return "NOT WATCHED: no served-model pointer to watch"
    if watch.get("state") != "watching":
        return f"NOT WATCHED: {watch.get('reason')}"
    scored, since = watch.get("scored_at"), watch.get("since")
    if isinstance(scored, int | float):
        return f"watched, last records {clock(scored)}"
    served = f" since it was served at {clock(since)}" if isinstance(since, int | float) else ""
    return f"watched{served}: no labelled record scored yet"


def _kept_inconclusive(models: CheckpointsFolder) -> str | None:
    """The newest candidate kept ``inconclusive``, and the records it needs, in words."""
    try:
        candidates = models.candidates()
    except OSError:  # not ours to list: the served line says enough
        return None
    for candidate in reversed(candidates):
        verdict = models.verdict(candidate)
        if verdict.outcome == Outcome.INCONCLUSIVE:
            needed = verdict.records_needed
            needs = f"about {needed} records" if needed is not None else "more records"
            return _cut(f"candidate {candidate.name} inconclusive: judged again as {needs} arrive")
    return None


def _newest_checkpoint(folder: AgentFolder) -> ServedModel | None:
    """Without a pointer (rlhf_ppo keeps none; se_darwin before its first promotion has
    no checkpoint either) the agent serves its newest checkpoint, if it has one."""
    try:
        newest = folder.checkpoints.newest_checkpoint()
    except OSError:  # no checkpoint folder yet, or not ours to list
        return None
    if newest is None:
        return None
    summary = folder.checkpoints.summary(newest) or {}  # as `model list` reads it
    step = summary.get("step")
    at_step = f" at step {step}" if isinstance(step, int) else ""
    return ServedModel(
        id=newest.name,
        precision=_precision(summary.get("precision")),
        how=f"newest checkpoint{at_step}, no served-model pointer",
    )


def _describe_pin(pointer: ServedPointer, held: list[str]) -> str:
    """A pin as one line: the pinned model, by what and when (an operator's command sets
    ``by`` and ``at``; a hand's pin, its fields), then the candidates held."""
    model = _text(pointer.served.id) or "the served model"
    fields = {} if pointer.pinned is None else pointer.pinned.to_json()
    if set(fields) == {"by", "at"}:
        said = f"{model} pinned by `{_text(fields['by'])}` at {_text(fields['at'])}"
    else:
        shown = ", ".join(f"{k}={_text(v)}" for k, v in list(fields.items())[:MAX_FIGURES])
        said = f"{model} pinned: {shown}"
    return _cut(f"{said}; {held_words(held)}")


def held_by_pin(models: CheckpointsFolder, pointer: ServedPointer | None) -> list[str]:
    """The candidates the gate held (a better model, verdict ``held``) while the
    pointer's pin stands: decided since the pin was set (when the pin says when), never
    the served model (``model promote`` serves a held one). None without a pin."""
    if pointer is None or pointer.pinned is None:
        return []
    since, served_id = stamp_seconds(pointer.pinned.at), pointer.served.id
    try:
        candidates = models.candidates()
    except OSError:  # not ours to list: the pin's own line says enough
        return []
    held = []
    for candidate in candidates:
        verdict = models.verdict(candidate)
        if candidate.name == served_id or verdict.outcome != Outcome.HELD:
            continue
        decided = verdict.decided_at_s
        if since is None or (decided is not None and decided >= since):
            held.append(candidate.name)
    return held


def held_words(held: list[str]) -> str:
    """The held candidates in words: their ids (the first few), or that there is none."""
    if not held:
        return "no candidate held by the pin yet"
    more = f" and {len(held) - MAX_HELD} more" if len(held) > MAX_HELD else ""
    return f"held by the pin: {', '.join(_cut(h) for h in held[:MAX_HELD])}{more}"


def _quality(pointer: ServedPointer) -> dict[str, Any] | None:
    """The served model's gate figures by name (its loss columns, the primary first, then
    the reported ones: any version's verdict), its records and set; a hand-edited entry
    as it stands."""
    served = pointer.served
    read = served.scores
    if read is None:  # none, or a hand's edit (kept as read)
        return _figures(served.kept("scores"))
    return _figures({**read.figures(), "records": read.records, "set": read.name})


def _figures(mapping: Any) -> dict[str, Any] | None:
    """A mapping's scalar figures (one level of nesting flattened to ``a.b``), bounded:
    what a reader can take in on one line; None when there is no mapping."""
    if not isinstance(mapping, Mapping):
        return None
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        items = value.items() if isinstance(value, Mapping) else [(None, value)]
        for sub, inner in items:
            if len(flat) >= MAX_FIGURES:
                return flat
            name = _cut(str(key) if sub is None else f"{key}.{sub}")
            if isinstance(inner, bool) or inner is None or isinstance(inner, int | str):
                flat[name] = _cut(inner) if isinstance(inner, str) else inner
            elif isinstance(inner, float):
                flat[name] = inner if math.isfinite(inner) else None
    return flat


def _precision(value: Any) -> PrecisionName | None:
    """A precision name read from a file, or None where it holds none (nothing to show)."""
    try:
        return precision_name(value)
    except ValueError:
        return None


def _text(value: Any) -> str | None:
    return None if value is None else _cut(str(value))


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"
