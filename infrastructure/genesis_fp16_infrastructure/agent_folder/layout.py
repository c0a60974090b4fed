"""Every file and folder name of an agent's state folder, once.

::

    <state_dir>/
        owner.lock                       the daemon's or a foreground train's flock
        record_cache/<agent>/            parsed record blocks (data.record_cache)
        agents/<agent>/                  HOME_AGENT
            precision_state.json         the precision guard's memory (demotions)
            precision_state.json.lock    its read-modify-write flock
            loss_scale.json              the fp16 scale carried to the next run
            last_success.json            when the last successful run ended
            last_run.json                the last run: outcome, precision, when, why
            run_history.jsonl            the recent runs, one JSON line each
            precision_calibration.json   a measured auto's timings
            captured_step_verified.json  the captured step's verdicts against eager
            probe_result.json            the precision probe's record
            run_request.json             the run file a child reads (removed after)
            data/                        generated sample data, and its ``.generated``
            fault_bundles/               the flight recorder's bundles, bounded by their own
            quarantine/                  a file of bad records per run
            outbox/                      events to announce (agent_folder.outbox)
                .lock                    its flock
                <order>-<id>.json        one event and its delivery log
                outbox.json              journal events pruned, events dropped
                staged/<id>.json         a verdict's event while its verdict is written
            checkpoints/                 HOME_CHECKPOINTS
                served.json              the served-model pointer
                served.json.lock         its writers' flock
                writer.lock              the one checkpoint writer's flock
                data_manifest.json       the served model's data manifest
                quarantine.jsonl         bad records of a run that names no quarantine file
                candidates/<id>/         HOME_CANDIDATE: one training run
                    candidate.json       its data and request
                    verdict.json         the gate's verdict
                    judged_ids.npz       a judged plugin's model: the record ids it knew
                    judged-live-<id>.npz a judged plugin's live watch against model <id>

A file found unusable at its name is set aside beside it under a name of its own,
``<name>.unusable-<UTC time>``: the set-aside policy and its names are
:mod:`~genesis_fp16_infrastructure.agent_folder.files`' (``set_aside``, ``aside_name``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# A checkpoint file's name, ckpt-<step>.pt (CheckpointManager.path_for): here, without torch
CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{10})\.pt$")
Home = Literal["state", "agent", "checkpoints", "candidate", "data", "outbox"]
# json: a record read whole; lock: an flock whose file holds its holder; log: lines a run
# writes (the run history's end is read back, a bad line skipped and counted, never set
# aside); binary: arrays read whole.
Kind = Literal["json", "lock", "log", "text", "binary"]

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class StateFile:
    """One file of the folder: its name, the folder it lives in, what a read takes at most
    and ``label``, its name in reports (``genesis_fp16_state_files_skipped_total{file}``)."""

    name: str
    label: str
    home: Home
    kind: Kind
    limit: int

    def at(self, folder: Path, id: str = "") -> Path:
        """The file in ``folder`` (its home: the agent's, checkpoint or candidate folder);
        ``id`` fills a name that has one (``live-{id}.npz``)."""
        return Path(folder) / self.name.replace("{id}", id)


# The agent's folder.
PRECISION_STATE = StateFile("precision_state.json", "precision_state", "agent", "json", 64 * KIB)
PRECISION_STATE_LOCK = StateFile(
    "precision_state.json.lock", "precision_state_lock", "agent", "lock", 4 * KIB
)
CARRIED_SCALE = StateFile("loss_scale.json", "carried_scale", "agent", "json", 4 * KIB)
LAST_SUCCESS = StateFile("last_success.json", "last_success", "agent", "json", 4 * KIB)
LAST_RUN = StateFile("last_run.json", "last_run", "agent", "json", 16 * KIB)
# Its bound is what a read takes from its end (agent_folder.run_history: COMPACT_BYTES,
# then a line of LINE_BYTES: 2 * 50 * 4 KiB + 4 KiB).
RUN_HISTORY = StateFile("run_history.jsonl", "run_history", "agent", "log", 404 * KIB)
CALIBRATION = StateFile(
    "precision_calibration.json", "precision_calibration", "agent", "json", 1 * MIB
)
CAPTURE_VERDICTS = StateFile(
    "captured_step_verified.json", "capture_verdicts", "agent", "json", 1 * MIB
)
PROBE_RECORD = StateFile("probe_result.json", "probe_result", "agent", "json", 1 * MIB)
RUN_REQUEST = StateFile("run_request.json", "run_request", "agent", "json", 4 * MIB)
SAMPLE_DATA_MARKER = StateFile(".generated", "sample_data_marker", "data", "text", 4 * KIB)
# The state folder's.
OWNER_LOCK = StateFile("owner.lock", "owner_lock", "state", "lock", 4 * KIB)
# The checkpoint folder's.
SERVED_POINTER = StateFile("served.json", "served_pointer", "checkpoints", "json", 1 * MIB)
POINTER_LOCK = StateFile("served.json.lock", "pointer_lock", "checkpoints", "lock", 4 * KIB)
WRITER_LOCK = StateFile("writer.lock", "writer_lock", "checkpoints", "lock", 4 * KIB)
QUARANTINE_LOG = StateFile("quarantine.jsonl", "quarantine", "checkpoints", "log", 0)
# A candidate's.
DATA_MANIFEST = StateFile("data_manifest.json", "data_manifest", "candidate", "json", 64 * MIB)
CANDIDATE_META = StateFile("candidate.json", "candidate_meta", "candidate", "json", 1 * MIB)
VERDICT = StateFile("verdict.json", "verdict", "candidate", "json", 1 * MIB)
# A judged plugin's model (genesis_fp16_infrastructure.judging): the hashes of the record
# ids it was trained or judged on, and its live watch's losses against model ``{id}``.
JUDGED_IDS = StateFile("judged_ids.npz", "judged_ids", "candidate", "binary", 256 * MIB)
JUDGED_WATCH = StateFile("judged-live-{id}.npz", "judged_watch", "candidate", "binary", 1024 * MIB)

# The outbox's (agent_folder.outbox): its own reader sets an unusable file aside and its
# tests damage each (tests/infrastructure/agent_folder/test_outbox.py); an event file's
# name is its order and id, so ``name`` here is the pattern's label.
OUTBOX_EVENT = StateFile("<order>-<id>.json", "outbox_event", "outbox", "json", 4 * MIB)
OUTBOX_STATE = StateFile("outbox.json", "outbox_state", "outbox", "json", 64 * KIB)
OUTBOX_LOCK = StateFile(".lock", "outbox_lock", "outbox", "lock", 4 * KIB)

# Every state file above but the outbox's (its own reader: agent_folder.outbox), in the
# order defined: each is listed by being defined, never in a second hand-kept list.
LAYOUT: tuple[StateFile, ...] = tuple(
    f for f in list(globals().values()) if isinstance(f, StateFile) and f.home != "outbox"
)

# Folders.
AGENTS_FOLDER = "agents"
DATA_FOLDER = "data"
CHECKPOINTS_FOLDER = "checkpoints"
QUARANTINE_FOLDER = "quarantine"
CANDIDATES_FOLDER = "candidates"
RECORD_CACHE_FOLDER = "record_cache"
OUTBOX_FOLDER = "outbox"  # the agent's events to announce (agent_folder.outbox)
OUTBOX_STAGED_FOLDER = "staged"  # in it: a verdict's event until its verdict is written
BUNDLES_FOLDER = "fault_bundles"  # the flight recorder's fault bundles (training.flight)


# An agent's name is its folder's (``agents/<agent>/``), a metric label and a settings key:
# never a path out of the state folder, a separator, a NUL or a newline.
AGENT_NAME_PATTERN = "[a-z][a-z0-9_]{0,63}"
_AGENT_NAME = re.compile(AGENT_NAME_PATTERN)
# A refused name is shown cut: a 300-character one need not fill the line.
_SHOWN_CHARS = 80


def is_agent_name(name: object) -> bool:
    """Whether ``name`` is an agent name (a ``str`` matching the pattern in full)."""
    return isinstance(name, str) and _AGENT_NAME.fullmatch(name) is not None


def check_agent_name(name: object) -> str:
    """``name`` when it is an agent name; a one-line :class:`ValueError` naming it otherwise.

    >>> check_agent_name("my_agent")
    'my_agent'
    >>> check_agent_name("../escape")
    Traceback (most recent call last):
    ...
    ValueError: agent name '../escape' is not valid: use [a-z][a-z0-9_]{0,63} (...)
    """
    if is_agent_name(name):
        return str(name)
    raise ValueError(
        f"agent name {shown_name(name)} is not valid: use {AGENT_NAME_PATTERN} (a lower-case "
        "letter, then up to 63 lower-case letters, digits and _)"
    )


def shown_name(name: object) -> str:
    """``name`` quoted for one line of text (its newlines escaped), cut when long.

    >>> print(shown_name("a\\nb"), shown_name("x" * 300)[-20:])
    'a\\nb' ... (300 characters)
    """
    text = repr(name)
    if len(text) <= _SHOWN_CHARS:
        return text
    size = f" ({len(name)} characters)" if isinstance(name, str) else ""
    return f"{text[:_SHOWN_CHARS]}...{size}"


def agent_root(state_dir: Path, agent: str) -> Path:
    """``<state_dir>/agents/<agent>``."""
    return Path(state_dir) / AGENTS_FOLDER / agent


def list_checkpoints(folder: Path) -> list[Path]:
    """The checkpoint files in ``folder`` (regular files named ``ckpt-<step>.pt``), oldest
    first; none where ``folder`` is no folder. Temp files, FIFOs and folders are not."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if CHECKPOINT_NAME.match(p.name) and p.is_file())
