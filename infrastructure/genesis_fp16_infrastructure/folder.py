"""``AgentFolder``: the one face of an agent's folder, ``<state_dir>/agents/<agent>/``.

Every folder and state file of the agent is a property here, named by the layout
(:mod:`~genesis_fp16_infrastructure.agent_folder.layout`), and every record the daemon
keeps between runs has a typed accessor, read and written with the folder's one reader
and atomic writer: the last run (``last_run.json``: what ``genesis-fp16 status`` shows),
the last success (``last_success.json``: the daemon's gauge survives a restart), the
run history (``agent_folder.run_records``), the precision's records, and the
generated sample data's marker::

    folder = AgentFolder(Path("state"), "my_agent")   # ValueError: not an agent name
    folder.checkpoint_dir        # state/agents/my_agent/checkpoints
    folder.save_run(result.history_entry(12.5, "daemon"))  # last_run.json, a history line
    folder.last_run()            # LastRun | None; UnusableStateFile for a bad file
    folder.history().entries     # the recent runs, oldest first
    folder.checkpoints.candidates()  # the served models' folder: CheckpointsFolder

:class:`~.checkpoints_folder.CheckpointsFolder` (its own module) is the face of one
checkpoints folder's served models (the pointer, its set-aside copy, the candidates and
their verdicts), an agent's (``AgentFolder.checkpoints``) or any other
(``train --checkpoint-dir``'s, a test's).

It reads no setting and logs nothing of its own: where the state folder is, and what a
run's result says, are the caller's.

It sits above the components whose records it reads and writes (the guard's memory, the
carried scale, the calibration, a checkpoint's summary, the fault bundles, a quarantine
file: ``training``, ``data``), and below the contract, whose plan reads the folder
through it. The agent folder's owner (``agent_folder``: the layout, the one reader and
atomic writer, the locks, the served-model lifecycle) sits below them all and imports
none of them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import msgspec

from genesis_fp16_infrastructure.agent_folder import (
    files,
    lock,
    repair,
    transitions,
)
from genesis_fp16_infrastructure.agent_folder import layout as L
from genesis_fp16_infrastructure.agent_folder.files import UnusableStateFile
from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    ServedEntry,
    ServedPointer,
)
from genesis_fp16_infrastructure.agent_folder.outbox import Outbox
from genesis_fp16_infrastructure.agent_folder.run_history import (
    KEEP,
    RunHistory,
    append_run,
    load_history,
)
from genesis_fp16_infrastructure.agent_folder.run_records import LastRun, RunEntry
from genesis_fp16_infrastructure.checkpoints_folder import CheckpointsFolder
from genesis_fp16_infrastructure.data.quarantine import new_quarantine_file
from genesis_fp16_infrastructure.precision_names import ROBUSTNESS
from genesis_fp16_infrastructure.training.flight.bundle_files import list_bundles
from genesis_fp16_infrastructure.training.precision import kept_measurements
from genesis_fp16_infrastructure.training.precision.kept_measurements import CaptureVerdict
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import CarriedScale
from genesis_fp16_infrastructure.training.precision.precision_memory import (
    PrecisionMemory,
    remember_demotions,
)
from genesis_fp16_infrastructure.training.reports import Calibration, Demotion

logger = logging.getLogger(__name__)

# A plugin's ``generate_sample_data(folder, count, seed)``: the file it wrote.
Generate = Callable[[Path, int, int], Path]
T = TypeVar("T")
VERSION = 1  # of last_run.json and last_success.json
SUCCESS_FIELD = "last_success_timestamp_seconds"
# The reason of the floor that replaces an unusable precision memory.
UNUSABLE_MEMORY_REASON = "state_file_unusable"


class _StatePath:
    """An agent's state file as a property of :class:`AgentFolder`: ``file`` in its root."""

    def __init__(self, file: L.StateFile) -> None:
        self.file = file

    def __get__(self, folder: AgentFolder, owner: object = None) -> Path:
        return self.file.at(folder.root)


@dataclass(frozen=True)
class AgentFolder:
    """The folders, files and records of ``agent`` under the state folder ``state_dir``."""

    state_dir: Path
    agent: str

    def __post_init__(self) -> None:
        # The last line, never a path out: the name was checked where it entered.
        L.check_agent_name(self.agent)
        object.__setattr__(self, "state_dir", Path(self.state_dir))

    @classmethod
    def at(cls, root: Path) -> AgentFolder:
        """The agent folder ``root`` (``<state_dir>/agents/<agent>``)."""
        root = Path(root)
        return cls(root.parent.parent, root.name)

    @classmethod
    def each(cls, state_dir: Path) -> list[AgentFolder]:
        """Every agent's folder under ``<state_dir>/agents``, by name; none when that is
        not there. A folder whose name is not an agent name is no agent's (the daemon
        never makes one)."""
        agents = Path(state_dir) / L.AGENTS_FOLDER
        try:
            names = sorted(os.listdir(agents))
        except OSError:
            return []
        return [
            cls(state_dir, name)
            for name in names
            if L.is_agent_name(name) and (agents / name).is_dir()
        ]

    # Every state file's label (a set-aside one's ``file``), as the layout names them.
    STATE_FILES: ClassVar[tuple[str, ...]] = tuple(f.label for f in L.LAYOUT)

    # -- the state folder's owner (genesis_fp16/service/state_lock.py) ----------------------
    OWNER_LOCK_NAME: ClassVar[str] = L.OWNER_LOCK.name
    write_owner = staticmethod(lock.write_holder)  # replace the record (fd: take_owner's)

    @staticmethod
    def take_owner(state_dir: Path, record: Mapping[str, Any]) -> int:
        """Own ``state_dir`` now or raise ``LockBusy`` naming its holder; ``record`` (pid,
        command) goes into its ``owner.lock``. Closing the descriptor returned drops it."""
        path = L.OWNER_LOCK.at(state_dir)
        return lock.take_lock(path, L.OWNER_LOCK, wait=False, record=record)

    @staticmethod
    def owner(state_dir: Path, attempts: int = 20) -> dict[str, Json] | None:
        """The record in ``state_dir``'s ``owner.lock`` (``lock.read_holder``); None: none."""
        return lock.read_holder(L.OWNER_LOCK.at(state_dir), L.OWNER_LOCK, attempts)

    # -- folders ----------------------------------------------------------------------
    @property
    def root(self) -> Path:
        return L.agent_root(self.state_dir, self.agent)

    @property
    def data_dir(self) -> Path:
        return self.root / L.DATA_FOLDER

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / L.CHECKPOINTS_FOLDER

    @property
    def checkpoints(self) -> CheckpointsFolder:
        """The served models of :attr:`checkpoint_dir` (:class:`CheckpointsFolder`)."""
        return CheckpointsFolder(self.checkpoint_dir)

    @property
    def outbox(self) -> Outbox:
        """The agent's event outbox (``agent_folder.outbox.Outbox``)."""
        return Outbox(self.root)

    @property
    def quarantine_dir(self) -> Path:
        """A file per run (:meth:`new_quarantine_file`)."""
        return self.root / L.QUARANTINE_FOLDER

    def new_quarantine_file(self, checkpoint_dir: Path | None = None) -> Path:
        """This run's file of quarantined records (``data.quarantine``), beside the
        checkpoints of a run in a ``checkpoint_dir`` of its own."""
        home = self.root if checkpoint_dir is None else Path(checkpoint_dir)
        return new_quarantine_file(home / L.QUARANTINE_FOLDER)

    def fault_bundles(self) -> list[dict[str, Any]]:
        """The flight recorder's fault bundles here, oldest first (``list_bundles``)."""
        return list_bundles(self.root / L.BUNDLES_FOLDER)

    # -- files: each the layout's file in :attr:`root` (:class:`_StatePath`) -----------------
    precision_state_path = _StatePath(L.PRECISION_STATE)
    loss_scale_path = _StatePath(L.CARRIED_SCALE)  # an fp16 run's last scale, for the next run
    calibration_path = _StatePath(L.CALIBRATION)  # a measured auto's timings (precision show)
    verification_path = _StatePath(L.CAPTURE_VERDICTS)  # the captured step's verdicts vs eager
    probe_record_path = _StatePath(L.PROBE_RECORD)
    last_success_path = _StatePath(L.LAST_SUCCESS)
    history_path = _StatePath(L.RUN_HISTORY)

    # -- the precision's records --------------------------------------------------------
    def precision_memory(self) -> PrecisionMemory | None:
        """The precision guard's remembered demotion; None: none. A broken file raises
        ValueError (``UnusableStateFile``: not a regular file, over its bound of 64 KiB (ten
        demotions are about 3 KB), not UTF-8)."""
        path = self.precision_state_path
        data = files.read_json(path, L.PRECISION_STATE)  # UnusableStateFile: unusable
        try:
            return None if data is None else PrecisionMemory.from_json(data)
        except ValueError as exc:  # another version, a missing or mistyped field
            raise ValueError(f"precision state file {str(path)!r} is unreadable: {exc}") from None

    def save_precision_memory(self, memory: PrecisionMemory | None) -> None:
        """Keep ``memory`` atomically (``files.write_json``); None forgets the demotion."""
        if memory is None:
            self.precision_state_path.unlink(missing_ok=True)
        else:
            files.write_json(self.precision_state_path, L.PRECISION_STATE, memory.to_json())

    def remember_run(
        self, previous: PrecisionMemory | None, demotions: Sequence[Demotion], promote_after: int
    ) -> PrecisionMemory | None:
        """Keep what the guard remembers after a run with ``demotions`` (its memory before
        it: ``previous``): the last demotion becomes the floor, a run without one counts as
        clean, and ``promote_after`` clean runs (0: never) forget the floor. Returns what it
        kept (None: nothing); raises the write's ``OSError``."""
        memory = remember_demotions(previous, demotions)
        if memory is not None and not demotions and promote_after:
            memory = None if memory.clean_runs >= promote_after else memory
        self.save_precision_memory(memory)
        return memory

    def replace_unusable_precision_memory(self, why: str) -> tuple[PrecisionMemory, files.SetAside]:
        """Set the unusable precision memory aside (``files.set_aside``: reported once) and
        keep in its place a floor of the most robust precision: a demotion it may have held
        is never forgotten into the precision that failed. Returns that memory and the
        set-aside, whose ``why`` says too when the floor could not be written (a file not
        ours to move: none is written; the floor holds for this run all the same)."""
        moved = files.set_aside(self.precision_state_path, L.PRECISION_STATE, why)
        floor = ROBUSTNESS[-1]
        at = datetime.now(UTC).isoformat(timespec="seconds")
        memory = PrecisionMemory("unknown", floor, UNUSABLE_MEMORY_REASON, 0, 0, at)
        if moved.aside is not None:
            try:
                self.save_precision_memory(memory)
            except OSError as exc:
                why = f"{moved.why}; cannot write the {floor} floor ({exc.strerror})"
                moved = replace(moved, why=why)
        return memory, moved

    @contextlib.contextmanager
    def precision_memory_locked(self) -> Iterator[None]:
        """Hold the precision memory's flock (``precision_state.json.lock``) around a
        read-modify-write of it: the daemon recording a run's demotions and `precision
        reset` beside it take turns, so neither overwrites what the other just wrote from a
        stale read. A folder this process cannot write is left unlocked (nothing of ours
        writes there either)."""
        try:
            fd = lock.take_lock(
                L.PRECISION_STATE_LOCK.at(self.root), L.PRECISION_STATE_LOCK, mode=0o600
            )
        except OSError:
            yield
            return
        try:
            yield  # the other writer waited its few milliseconds in take_lock
        finally:
            os.close(fd)  # releases the flock

    def calibration(self, unusable: files.Listener | None = None) -> Calibration | None:
        """A measured ``auto``'s kept timings; None: none, another version, or unusable
        (set aside, reported, and told to ``unusable``)."""
        return kept_measurements.read_calibration(self.calibration_path, unusable)

    def calibration_of_another_release(self) -> kept_measurements.OtherRelease | None:
        """The calibration file when another release wrote it (kept; its rows are not
        read here: ``kept_measurements.OtherRelease``); None: none, or this release's."""
        return kept_measurements.other_release(self.calibration_path)

    def capture_verdicts(self, unusable: files.Listener | None = None) -> dict[str, CaptureVerdict]:
        """The captured step's kept verdicts by key id; {} without a usable file."""
        return kept_measurements.read_capture_verdicts(self.verification_path, unusable)

    def probe_record(
        self, parse: Callable[[Any], T], unusable: files.Listener | None = None
    ) -> T | None:
        """The probe's record, as ``parse`` reads it (``files.load``); None: none, unusable."""
        return files.load(self.probe_record_path, L.PROBE_RECORD, parse, unusable)

    def save_probe_record(self, record: Mapping[str, Any]) -> None:
        """Keep the probe's record atomically: the old one or this, never half of it."""
        files.write_json(self.probe_record_path, L.PROBE_RECORD, record)

    def carried_scale(self) -> CarriedScale | None:
        """The fp16 loss scale carried to the next run; None: none, another version, or
        unusable (set aside as ``loss_scale.json.unusable-*`` and reported: a fresh start)."""

        def decode(data: Any) -> CarriedScale | None:
            if data.get("version") == CarriedScale.VERSION:
                return CarriedScale.from_json(data)
            return None  # another version: a fresh start

        return files.load(self.loss_scale_path, L.CARRIED_SCALE, decode)

    def save_carried_scale(self, carried: CarriedScale | None) -> None:
        """Carry ``carried`` to the next run, atomically; None forgets the scale."""
        if carried is None:
            self.loss_scale_path.unlink(missing_ok=True)
        else:
            files.write_json(self.loss_scale_path, L.CARRIED_SCALE, carried.to_json())

    # -- the run records ----------------------------------------------------------------
    def last_run(self) -> LastRun | None:
        """The last run, None when none was recorded; ``UnusableStateFile`` (one line
        naming the file) for a file that is not a record."""
        data = self._record(L.LAST_RUN)
        try:
            return None if data is None else msgspec.convert(data, LastRun)
        except msgspec.ValidationError as exc:
            raise UnusableStateFile(f"{L.LAST_RUN.at(self.root)}: {exc}") from None

    def _record(self, file: L.StateFile) -> dict[str, Any] | None:
        """The record of ``VERSION`` that ``file`` holds, its version taken out; None: no
        file; ``UnusableStateFile`` (one line naming the file) for any other content."""
        path = file.at(self.root)
        data = files.read_json(path, file)
        found = data.pop("version", None) if isinstance(data, dict) else type(data).__name__
        if data is not None and found != VERSION:
            raise UnusableStateFile(f"{path}: version {found!r}, expected {VERSION}")
        return data

    def save_run(self, entry: RunEntry) -> None:
        """Keep a finished run: ``entry.run`` as the last run and ``entry`` at the end of
        the history (``TrainResult.history_entry``; a run that ended without a result:
        ``RunEntry.of_error``). Never raises for the disk: a failure is logged."""
        self.save_last_run(entry.run)
        append_run(self.root, entry)

    def save_last_run(self, record: LastRun) -> None:
        """Keep ``record`` as the last run; a failure is logged, never raised."""
        data = {"version": VERSION, **asdict(record)}
        _write(L.LAST_RUN.at(self.root), L.LAST_RUN, data, "`status` will show an older run")

    def history(self, last: int = KEEP) -> RunHistory:
        """The ``last`` recent runs, oldest first; ``UnusableStateFile`` for a file that
        cannot be read (a line that is no entry is counted, never raised)."""
        return load_history(self.root, last)

    def last_success(self) -> float | None:
        """When the last successful run ended (None: never); ``UnusableStateFile`` for a
        file that holds no usable time (torn, another format, a FIFO, a time that is not a
        positive finite number)."""
        data = self._record(L.LAST_SUCCESS)
        if data is None:
            return None
        when, path = data.get(SUCCESS_FIELD), self.last_success_path
        if isinstance(when, bool) or not isinstance(when, int | float):
            raise UnusableStateFile(f"{path}: {SUCCESS_FIELD}={when!r} is not a number")
        if not (math.isfinite(when) and when > 0):
            raise UnusableStateFile(f"{path}: {SUCCESS_FIELD}={when!r} is not a positive time")
        return float(when)

    def stored_last_success(self, unusable: files.Listener | None = None) -> float:
        """The last success time, 0 when never or when its file is unusable: then set
        aside as ``last_success.json.unusable-*``, reported, and told to ``unusable``."""
        try:
            return self.last_success() or 0.0
        except UnusableStateFile as exc:
            event = files.set_aside(self.last_success_path, L.LAST_SUCCESS, str(exc))
            if unusable is not None:
                unusable(event)
            return 0.0

    def save_last_success(self, when: float) -> None:
        """Keep ``when`` as the last success time; a failure is logged, never raised (the
        run that succeeded stays a success; only a restart would lose its time)."""
        data = {"version": VERSION, "agent": self.agent, SUCCESS_FIELD: when}
        _write(self.last_success_path, L.LAST_SUCCESS, data, "a restart will not show it")

    # -- the served model's transitions, as the operator and the daemon make them ----------
    def recover(self) -> ServedPointer | None:
        """Settle what a writer killed midway left in the checkpoints folder, and return
        the pointer (``agent_folder.transitions.recover``: the daemon's start-up, the operator's
        commands)."""
        return transitions.recover(self.checkpoint_dir)

    def promote(self, entry: ServedEntry, by: str) -> bool:
        """Serve ``entry`` (a kept candidate's pointer entry) by hand and pin it, pinned by
        the command ``by``; whether an unusable pointer was replaced
        (``agent_folder.repair.serve_by_hand``)."""
        return repair.serve_by_hand(self.checkpoint_dir, entry, transitions.operator_pin(by))

    def roll_back(self, by: str) -> tuple[ServedEntry, bool]:
        """Serve the model served before this one, pinned by the command ``by``: its entry,
        and whether an unusable pointer was replaced (``agent_folder.repair.roll_back_by_hand``)."""
        return repair.roll_back_by_hand(self.checkpoint_dir, transitions.operator_pin(by))

    def unpin(self) -> ServedPointer | None:
        """Lift the operator's pin (``agent_folder.transitions.unpin``); None: nothing served."""
        return transitions.unpin(self.checkpoint_dir)

    def set_aside_unusable_pointer(self) -> tuple[str | None, Path | None]:
        """Set an unusable pointer aside under its lock: why it is unusable, and where it
        went (``agent_folder.repair.set_aside_unusable``)."""
        return repair.set_aside_unusable(self.checkpoint_dir)

    # -- the generated sample data --------------------------------------------------------
    def sample_data(self, generate: Generate, count: int, seed: int) -> Path:
        """The agent's generated sample data, ``generate``-d into the data folder on first
        use. A marker is written after ``generate`` returns, so a generation cut short is
        redone rather than half-used; it holds the path relative to the data folder, so a
        state folder copied or mounted elsewhere keeps finding its data."""
        marker = L.SAMPLE_DATA_MARKER.at(self.data_dir)
        found = _read_marker(marker, self.data_dir)
        if found is not None:
            return found
        self.data_dir.mkdir(parents=True, exist_ok=True)
        data_path = generate(self.data_dir, count, seed)
        files.write_bytes(marker, L.SAMPLE_DATA_MARKER, _marker_text(data_path, self.data_dir))
        return data_path


def _write(path: Path, file: L.StateFile, data: Any, lost: str) -> None:
    """Write a record the run's outcome does not depend on: a failure is logged."""
    try:
        files.write_json(path, file, data)
    except OSError as exc:
        logger.error("cannot keep %s (%s): %s", path, exc.strerror or exc, lost)


def _read_marker(marker: Path, data_dir: Path) -> Path | None:
    """The marked data path, or None to (re)generate: no marker, or one that is unusable
    (torn, over its bound, not UTF-8, a folder, a FIFO, a link, naming no file), which is
    set aside as ``.generated.unusable-*`` and reported. Never a failed run every hour for
    a file nobody documented."""
    try:
        text = files.read_text(marker, L.SAMPLE_DATA_MARKER.limit)
    except UnusableStateFile as error:
        files.set_aside(marker, L.SAMPLE_DATA_MARKER, str(error))
        return None
    if text is None:
        return None
    path = _marked_path(text.strip(), data_dir) if text.strip() else None
    if path is not None and path.exists():
        return path
    moved = files.set_aside(
        marker, L.SAMPLE_DATA_MARKER, f"{marker}: names no data file ({text.strip()[:200]!r})"
    )
    if moved.aside is None and (marker.exists() or marker.is_symlink()):
        raise UnusableStateFile(moved.why)
    return None  # reported: the sample data is generated again


def _marker_text(data_path: Path, data_dir: Path) -> bytes:
    """The path relative to ``data_dir`` when it lies inside it (a plugin may write
    elsewhere: that path is kept as it is)."""
    try:
        return str(Path(data_path).resolve().relative_to(data_dir.resolve())).encode()
    except ValueError:
        return str(data_path).encode()


def _marked_path(text: str, data_dir: Path) -> Path:
    """The marker's path: relative ones under ``data_dir``; an absolute one (written
    before markers were relative) as it is, or, when the state folder has moved since,
    its longest tail that exists under ``data_dir``."""
    path = Path(text)
    if not path.is_absolute():
        return data_dir / path
    if path.exists():
        return path
    for start in range(1, len(path.parts)):
        moved = data_dir.joinpath(*path.parts[start:])
        if moved.exists():
            return moved
    return path
