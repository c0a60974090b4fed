"""The one reader, writer and policy for an unusable file of the agent's folder.

Every state file is read here, as a regular file only and at most its layout's bound
(:class:`~genesis_fp16_infrastructure.agent_folder.layout.StateFile` ``limit``): a
folder, a FIFO (which would block a read for ever), a link, a file over the bound, bytes
that are not UTF-8, text that is not JSON or a record its decoder refuses is *unusable*.
An unusable file is set aside as ``<name>.unusable-<UTC time>`` (``-2``, ``-3``... when
two land in one microsecond: :func:`aside_name`; a name nothing holds:
:func:`free_aside_path`; ``<name>.unusable``, the name before, is still read as the
oldest) and reported, once, to every listener (:func:`on_set_aside`; the daemon counts
it in ``genesis_fp16_state_files_skipped_total{agent, file}``); the reader goes on as if
there were no file. Never a traceback, never a run failed for ever by a
file nobody wrote, never the evidence of an earlier damage overwritten::

    memory = load(path, PRECISION_STATE, PrecisionMemory.from_json)   # None: none, or set aside
    write_json(path, PRECISION_STATE, memory.to_json())               # atomic

Writes are atomic (:func:`write_atomic`, the library's one atomic writer: after a crash
the old file or the new one is there, never half of one); a folder, FIFO or link at the
name is set aside first, so that a write never fails for it either.

Each folder keeps its newest :data:`KEEP_ASIDES` set-aside entries (all names together),
holding at most :data:`KEEP_ASIDE_BYTES` bytes, as the quarantine folder bounds its files:
the oldest go first, and the one just set aside always stays, whatever its size
(:func:`bound_asides`). :func:`newest_aside` finds the latest of a name (the served-model
pointer's repair reads it).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, BinaryIO, TextIO, TypeVar

from genesis_fp16_infrastructure.agent_folder.layout import AGENTS_FOLDER, RUN_REQUEST, StateFile

T = TypeVar("T")
logger = logging.getLogger(__name__)

# The set-aside entries one folder keeps, every name together (as data.quarantine bounds
# its folder): past either bound the oldest go; the newest is always kept.
KEEP_ASIDES = 20
KEEP_ASIDE_BYTES = 64 * 2**20
ASIDE_SUFFIX = ".unusable"
# A set-aside entry's name (:func:`aside_name`): ``<name>.unusable``, the name before, or
# <name>.unusable <name>.unusable-<%Y%m%dT%H%M%S.%fZ>[-n]: the time sorts as text
_ASIDE = re.compile(
    r"^(?P<name>.+)\.unusable(?:-(?P<at>\d{8}T\d{6}\.\d{6}Z)(?:-(?P<n>[1-9]\d*))?)?$"
)


class UnusableStateFile(ValueError):
    """A state file that cannot be read as one: not a regular file, too big, not UTF-8."""


@dataclass(frozen=True)
class SetAside:
    """An unusable state file: where it was, where it went (None: it could not be moved),
    why, its layout label, and the agent whose folder held it ("": no agent's)."""

    path: Path
    aside: Path | None
    why: str
    label: str
    agent: str = ""

    def relayed(self) -> dict[str, dict[str, str]]:
        """The line a run's child prints for its parent about a file it set aside: its
        agent and label, which the parent's listeners hear (:meth:`report_relayed`)."""
        return {"set_aside": {"agent": self.agent, "file": self.label}}

    @staticmethod
    def report_relayed(line: object) -> None:
        """Tell every listener of a file a run's child set aside, from the ``set_aside`` of
        its :meth:`relayed` line (the child logged it and moved it; nothing is moved here)."""
        if isinstance(line, dict) and {"agent", "file"} <= set(line):
            why = "set aside by a run's child"
            _report(SetAside(Path(), None, why, str(line["file"]), str(line["agent"])))


Listener = Callable[[SetAside], None]
_listeners: list[Listener] = []


def on_set_aside(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` for every file set aside in this process, or relayed to it by a
    run's child (:meth:`SetAside.report_relayed`; the daemon counts each in
    ``genesis_fp16_state_files_skipped_total{agent, file}``), once, however often it is
    added; returns its removal."""
    if listener not in _listeners:
        _listeners.append(listener)
    return lambda: _listeners.remove(listener) if listener in _listeners else None


def _report(event: SetAside) -> None:
    for listener in list(_listeners):
        listener(event)


def aside_name(name: str, at: datetime, n: int = 1) -> str:
    """The set-aside name of ``name`` at the UTC time ``at``; ``n`` > 1 when taken.

    >>> from datetime import UTC, datetime
    >>> aside_name("run_request.json", datetime(2026, 11, 25, 14, 40, 33, 5, tzinfo=UTC), 2)
    'run_request.json.unusable-20261125T144033.000005Z-2'
    """
    return f"{name}{ASIDE_SUFFIX}-{at:%Y%m%dT%H%M%S.%fZ}" + (f"-{n}" if n > 1 else "")


def parse_aside(name: str) -> tuple[str, tuple[str, int]] | None:
    """For a set-aside name: the name it was set aside from and its age key (greater:
    newer; the old bare ``<name>.unusable`` is the oldest); None for any other name.

    >>> parse_aside("served.json.unusable-20261125T144033.000005Z-2")
    ('served.json', ('20261125T144033.000005Z', 2))
    >>> parse_aside("served.json.unusable"), parse_aside("served.json")
    (('served.json', ('', 0)), None)
    """
    found = _ASIDE.match(name)
    if found is None:
        return None
    return found["name"], (found["at"] or "", int(found["n"] or (1 if found["at"] else 0)))


def agent_of(path: Path) -> str | None:
    """The agent whose folder holds ``path`` (the name after ``agents/``), or None: the
    agent a set-aside is reported for (``SetAside.agent``)."""
    parts = Path(path).parts
    for index in range(len(parts) - 2, -1, -1):
        if parts[index] == AGENTS_FOLDER:
            return parts[index + 1]
    return None


def free_aside_path(path: Path, now: datetime | None = None) -> Path:
    """A name beside ``path`` that nothing holds, for setting it aside at ``now`` (UTC;
    default: now): ``<name>.unusable-<time>``, then ``-2``, ``-3``... while taken."""
    path, at = Path(path), now or datetime.now(UTC)
    for n in itertools.count(1):
        aside = path.with_name(aside_name(path.name, at, n))
        if not os.path.lexists(aside):
            return aside
    raise AssertionError("unreachable")  # itertools.count never ends


def newest_aside(path: Path) -> Path | None:
    """The entry ``path`` was last set aside as (None: never, or all pruned since)."""
    found = asides(Path(path).parent, Path(path).name)
    return found[-1] if found else None


def asides(folder: Path, name: str | None = None) -> list[Path]:
    """The set-aside entries in ``folder`` (those of the file ``name`` only, unless None),
    oldest first."""
    try:
        entries = os.listdir(folder)
    except OSError:  # no folder: nothing set aside in it
        return []
    keyed = []
    for entry in entries:
        parsed = parse_aside(entry)
        if parsed is not None and (name is None or parsed[0] == name):
            keyed.append((parsed[1], entry))
    return [Path(folder) / entry for _, entry in sorted(keyed)]


def bound_asides(
    folder: Path, keep: int = KEEP_ASIDES, keep_bytes: int = KEEP_ASIDE_BYTES
) -> list[Path]:
    """Remove the oldest set-aside entries of ``folder`` past the newest ``keep``, or past
    ``keep_bytes`` bytes together (the newest always stays); returns those removed."""
    removed, total = [], 0
    for index, old in enumerate(reversed(asides(Path(folder)))):
        total += folder_bytes(old) if total <= keep_bytes else 0  # past the bound: no need to walk
        if index > 0 and (index >= keep or total > keep_bytes):
            try:
                remove_entry(old)
            except OSError as error:  # evidence kept rather than a read failed
                logger.warning("cannot remove old set-aside %s: %s", old, error)
                continue
            removed.append(old)
    return removed


def folder_bytes(path: Path) -> int:
    """Bytes under ``path`` (a file, or a folder walked without following links): a
    set-aside entry's size, and an agent's disk use (a gauge)."""
    try:
        info = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(info.st_mode):
        return info.st_size
    total = 0
    for root, _, names in os.walk(path, onerror=lambda _: None):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def remove_entry(path: Path) -> None:
    """Remove the file or folder ``path``; a link, itself only (never followed)."""
    if stat.S_ISDIR(os.lstat(path).st_mode):
        shutil.rmtree(path)  # a link inside is removed, never followed
    else:
        path.unlink(missing_ok=True)


def read_text(path: Path, limit: int) -> str | None:
    """The text of the small state file ``path``, or None when there is none.

    Read as a regular file only, at most ``limit`` bytes: a folder, a FIFO, a link, a
    file over ``limit`` bytes or bytes that are not UTF-8 raise
    :class:`UnusableStateFile` naming the path and why.
    """
    data = read_bytes(path, limit)
    return None if data is None else _text(Path(path), data)


def read_bytes(path: Path, limit: int, tail: bool = False) -> bytes | None:
    """The bytes of ``path`` as :func:`read_text` reads them, not decoded (a cache entry);
    ``tail``: the last lines within ``limit`` bytes (a line cut by the limit left out; a
    file of lines read from its end)."""
    found = _read_bytes(Path(path), limit, tail)
    return None if found is None else found[0]


def open_binary(path: Path, limit: int) -> tuple[BinaryIO, int] | None:
    """``path`` open for reading as :func:`read_bytes` reads it (a regular file of at most
    ``limit`` bytes, no link followed, a FIFO never waited on), and its inode; None: no
    file. For a reader that decodes a part at a time (a zip's members), never the whole
    file in memory; the caller closes it."""
    opened = _open_regular(Path(path))
    if opened is None:
        return None
    fd, info = opened
    if info.st_size > limit:
        os.close(fd)
        raise UnusableStateFile(f"{path}: {info.st_size} bytes, over the {limit}-byte bound")
    os.set_blocking(fd, True)  # a regular file: O_NONBLOCK only kept a FIFO from blocking
    return os.fdopen(fd, "rb"), info.st_ino


def _open_regular(path: Path) -> tuple[int, os.stat_result] | None:
    """A read-only descriptor of the regular file ``path`` and its stat (None: no file);
    :class:`UnusableStateFile` for a folder, a FIFO, a link or a file that cannot be opened."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as error:  # ELOOP: a link; EACCES, ...
        raise UnusableStateFile(f"{path}: cannot be opened ({error.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise UnusableStateFile(f"{path}: {kind}")
    return fd, info


def _read_bytes(path: Path, limit: int, tail: bool = False) -> tuple[bytes, int] | None:
    """The bytes and the inode they were read from (a set-aside moves that file only)."""
    opened = _open_regular(path)
    if opened is None:
        return None
    fd, info = opened
    try:
        if tail:
            start = max(0, info.st_size - limit)
            data = os.pread(fd, info.st_size - start, start)
            return (data.split(b"\n", 1)[-1] if start else data), info.st_ino
        if info.st_size > limit:
            raise UnusableStateFile(f"{path}: {info.st_size} bytes, over the {limit}-byte bound")
        chunks, size = [], 0
        while size <= limit:  # a regular file: read() returns what there is, then b""
            # the whole file in one read where it can (one buffer, no copy when joined)
            chunk = os.read(fd, min(limit + 1 - size, max(info.st_size + 1 - size, 1 << 16)))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise UnusableStateFile(f"{path}: over the {limit}-byte bound")
    return b"".join(chunks), info.st_ino


def read_json(path: Path, file: StateFile) -> Any | None:
    """The JSON value of ``path`` (None: no file); :class:`UnusableStateFile` for one
    that is not a regular file within ``file.limit`` holding JSON. Sets nothing aside:
    for a reader whose file is set aside under a lock of its own (the served pointer)."""
    found = _read_bytes(Path(path), file.limit)
    return None if found is None else _parse(Path(path), found[0])


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnusableStateFile(f"{path}: not UTF-8 text") from None


def _parse(path: Path, data: bytes) -> Any:
    text = _text(path, data)  # outside the try: UnusableStateFile is a ValueError
    try:
        return json.loads(text)
    except ValueError as error:
        raise UnusableStateFile(f"{path}: not JSON ({error})") from None


def load(
    path: Path,
    file: StateFile,
    decode: Callable[[Any], T],
    unusable: Listener | None = None,
) -> T | None:
    """``decode`` of the JSON at ``path``; None when there is no file, or when it is
    unusable (unreadable, or ``decode`` raises ValueError, KeyError, TypeError or
    AttributeError), which is then set aside and reported (:func:`set_aside`), and told
    to ``unusable`` too."""
    path = Path(path)
    inode = None
    try:
        found = _read_bytes(path, file.limit)
        if found is None:
            return None
        inode = found[1]
        return decode(_parse(path, found[0]))
    except UnusableStateFile as error:
        why = str(error)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        why = f"{path}: not a {file.label} record ({type(error).__name__}: {error})"
    event = set_aside(path, file, why, inode)
    if unusable is not None:
        unusable(event)
    return None


def load_each(
    paths: Iterable[Path], file: StateFile, decode: Callable[[Path, Any], T]
) -> list[T | None]:
    """:func:`load` of each of ``paths`` in order (``decode`` is given the path and its
    JSON): one pass over the files of one kind that a caller needs before it decides."""
    return [load(path, file, functools.partial(decode, Path(path))) for path in paths]


def set_aside(path: Path, file: StateFile, why: str, inode: int | None = None) -> SetAside:
    """Rename the unusable ``path`` to a name of its own (:func:`free_aside_path`; a
    folder, FIFO or link is moved, never followed), bound the folder's set-aside entries
    (:func:`bound_asides`) and report it to every listener, once per damage: a file
    another reader moved first, or one that cannot be moved and was reported before, is
    not reported again. ``inode``: the file that was read; one replaced since (a writer's
    good file) is left where it is."""
    path = Path(path)
    aside: Path | None = None
    info, report = None, True
    try:
        info = os.lstat(path)
        if inode is not None and info.st_ino != inode:
            why += "; replaced meanwhile, left in place"
        else:
            aside = free_aside_path(path)
            os.rename(path, aside)  # onto a free name: never over earlier evidence
    except FileNotFoundError:  # another reader set it aside first, and reported it
        aside, report = None, False
    except OSError as error:
        why += f"; cannot set it aside ({error.strerror}): delete it"
        aside, report = None, _first_report_of(path, info)
    event = SetAside(path, aside, why, file.label, agent_of(path) or "")
    logger.warning("unusable state file set aside as %s: %s", aside, why)
    if aside is not None:
        bound_asides(path.parent)
    if report:
        _report(event)
    return event


# What could not be moved, as (path, device, inode, mtime): reported once per process.
_stuck: set[tuple[str, int, int, int]] = set()


def _first_report_of(path: Path, info: os.stat_result | None) -> bool:
    if info is None:  # not even looked at (EACCES): nothing to know it again by
        return True
    key = (str(path), info.st_dev, info.st_ino, info.st_mtime_ns)
    if key in _stuck:
        return False
    if len(_stuck) > 4096:  # a bound, not a cache policy: forgetting costs a count
        _stuck.clear()
    _stuck.add(key)
    return True


def clear_way(path: Path, file: StateFile) -> SetAside | None:
    """Before writing ``path``: set aside what sits at its name and is no regular file
    (a folder, a FIFO, a link); None when the way is clear."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
    return set_aside(Path(path), file, f"{path}: {kind} in the way of a write")


def write_atomic(
    path: Path, write: bytes | Callable[[IO[bytes]], object], sync: bool = True
) -> None:
    """Write ``path`` from ``write``: the bytes, or a function writing them to the handle
    (a file written a part at a time). Through a temp file in the same folder, flushed and
    fsynced, renamed over ``path`` with ``os.replace``, then the folder fsynced so the rename
    itself is durable (``sync=False``: neither fsync, the rename alone: an outbox event).
    A failure removes the temp file and leaves ``path`` as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(write, bytes):
                handle.write(write)
            else:
                write(handle)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException as error:
        Path(tmp_name).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None and error.errno is not None:
            raise OSError(error.errno, error.strerror, str(path)) from error  # write() names none
        raise
    if sync:
        fsync_directory(path.parent)


def write_json_atomic(path: Path, data: Any) -> None:
    """:func:`write_atomic` of ``data`` as indented, key-sorted JSON with a final newline.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "state.json"
    >>> write_json_atomic(target, {"precision": "bf16"})
    >>> target.read_text()
    '{\\n  "precision": "bf16"\\n}\\n'
    """
    write_atomic(path, json_bytes(data))


def json_bytes(data: Any) -> bytes:
    """``data`` as a state file holds it: indented, key-sorted JSON, a final newline."""
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def fsync_directory(directory: Path) -> None:
    """Make the renames in ``directory`` durable."""
    # Not every platform can open a folder (Windows); there the rename is as durable as it gets.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Write:
    """One step of :func:`write_in_order`: ``data`` written atomically to ``path`` (of
    the layout's ``file``), fsynced with its folder unless ``sync`` is False; bytes as
    they are, any other value as a state file's JSON (:func:`json_bytes`)."""

    path: Path
    file: StateFile
    data: object
    sync: bool = True


@dataclass(frozen=True)
class Remove:
    """One step of :func:`write_in_order`: ``path`` removed (none there: nothing)."""

    path: Path


@dataclass(frozen=True)
class Move:
    """One step of :func:`write_in_order`: ``path`` renamed to ``target`` (one rename, not
    fsynced: a staged outbox event moved in); when ``target`` is there already, ``path``
    removed instead (the copy there stands)."""

    path: Path
    target: Path


def write_in_order(steps: Iterable[Write | Remove | Move]) -> None:
    """Each step, in order, each done before the next begins (a kill between two leaves
    the first done, the second not): a write sets aside a folder, FIFO or link in the way
    and writes atomically (:func:`write_atomic`); a removal unlinks; a move renames.

    >>> import tempfile
    >>> from genesis_fp16_infrastructure.agent_folder.layout import OUTBOX_EVENT
    >>> folder = Path(tempfile.mkdtemp())
    >>> write_in_order([Write(folder / "a.json", OUTBOX_EVENT, b"{}"), Remove(folder / "b")])
    >>> sorted(p.name for p in folder.iterdir()), (folder / "a.json").read_bytes()
    (['a.json'], b'{}')
    """
    for step in steps:
        if isinstance(step, Remove):
            Path(step.path).unlink(missing_ok=True)
        elif isinstance(step, Move):
            if os.path.lexists(step.target):
                Path(step.path).unlink(missing_ok=True)
            else:
                os.replace(step.path, step.target)
        else:
            data = step.data if isinstance(step.data, bytes) else json_bytes(step.data)
            clear_way(step.path, step.file)
            write_atomic(Path(step.path), data, sync=step.sync)


def write_json(path: Path, file: StateFile, data: Any) -> None:
    """Write ``data`` as JSON atomically, setting aside a folder, FIFO or link in the way."""
    clear_way(path, file)
    write_json_atomic(Path(path), data)


@dataclass(frozen=True)
class JsonStateFile:
    """A JSON state file of the layout with its one read and one write: :func:`read_json`
    (within its bound; an unusable file set aside) and :func:`write_json` (atomic; a
    folder, FIFO or link in the way set aside).

    >>> import tempfile
    >>> path = RUN_FILE.at(Path(tempfile.mkdtemp()))
    >>> RUN_FILE.write(path, {"log_level": "INFO"}); RUN_FILE.read(path)
    {'log_level': 'INFO'}
    """

    file: StateFile

    def at(self, folder: Path) -> Path:
        """The file in ``folder`` (its home: for :data:`RUN_FILE`, the agent's folder)."""
        return self.file.at(folder)

    def read(self, path: Path) -> Any | None:
        return read_json(path, self.file)

    def write(self, path: Path, data: Any) -> None:
        write_json(path, self.file, data)


# What the daemon's launcher writes for a run's child, beside the checkpoint folder.
RUN_FILE = JsonStateFile(RUN_REQUEST)


def write_bytes(path: Path, file: StateFile, data: bytes) -> None:
    """Write ``data`` atomically, setting aside a folder, FIFO or link in the way."""
    clear_way(path, file)
    write_atomic(Path(path), data)


def open_log(path: Path, file: StateFile) -> TextIO:
    """A new file of lines at ``path`` for this run to write (any earlier one replaced),
    setting aside a folder, FIFO or link in the way, never opening one."""
    parent = Path(path).parent
    if not parent.is_dir() and (parent.exists() or parent.is_symlink()):
        set_aside(parent, file, f"{parent}: not a folder, in the way of {Path(path).name}")
    parent.mkdir(parents=True, exist_ok=True)
    clear_way(path, file)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(path, flags, 0o644), "w", encoding="utf-8")


def last_write(folder: Path) -> float:
    """The newest modification time of the folder or anything in it."""
    times = [folder.stat().st_mtime]
    times += [path.stat().st_mtime for path in folder.rglob("*") if path.is_file()]
    return max(times)
