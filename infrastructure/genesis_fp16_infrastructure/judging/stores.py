"""What a judged run keeps in a candidate's folder, as numpy arrays through the agent
folder's bounded reader and atomic writer (agent_folder.files):

* ``judged_ids.npz``: the sorted hashes of the record ids the model was trained or judged
  on (the ones it *knew*): the live watch scores only records that neither the served
  model nor its predecessor knew, and a run whose records the served model all knew has
  nothing to learn;
* ``judged-live-<predecessor id>.npz``: the live watch's records in arrival order (id
  hashes, segments, and per loss column ``served/<metric>`` and ``previous/<metric>``,
  NaN where a record was not scored on that column), so each record counts once.

An id is hashed to 64 bits by :func:`~.split.id_hashes`, the held-out split's hash too.
Each is read like any other cache (issue 92): a regular file within its layout bound (a
FIFO never waited on), then every member's .npy header (name, dtype, 1-D, one length,
and the decoded size of all together) checked before any array is decoded. A file that
fails is set aside and reported (agent_folder.files); the reader then goes on as if
there were none (the watch starts again). The writer holds the same decoded bound
(:func:`room`, :func:`decoded_bound`).

What a process keeps of the lookups among these ids from run to run (the orders, the
listing's answers) is :mod:`.id_lookups`'; the known ids a process wrote are kept here,
by the file's identity.

>>> read_known_ids(Path("no-such-candidate")) is None
True
"""

from __future__ import annotations

import zipfile
import zlib
from collections import Counter
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import IO, Any, TypeGuard

import numpy as np

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import JUDGED_IDS, JUDGED_WATCH, StateFile
from genesis_fp16_infrastructure.contract.split import sorted_unique
from genesis_fp16_infrastructure.judging import id_lookups
from genesis_fp16_infrastructure.kept_in_memory import KeptValue, identity_of, process_memory

# A watch record's segment (the plugin's RecordLosses.segments: se_darwin's Genesis agent),
# cut to this many characters; "" where the plugin declares none, or a store written
# before segments were kept.
SEGMENT_CHARS = 64


def read_known_ids(candidate: Path, budget: int | None = None) -> np.ndarray | None:
    """The ids the candidate's model knew (sorted distinct hashes); None: no file, or
    unusable. ``budget``: the request's ``keep_in_memory_bytes``; where this process
    wrote the file (:func:`write_known_ids`) and it is the very file written (its
    identity: device, inode, size, mtime and ctime), the ids written, not read back and
    checked again (a run's served model is the candidate the last run wrote); a file
    changed since, or never written here, is read and checked whole."""
    return read_known(candidate, budget)[0]


def read_known(
    candidate: Path, budget: int | None, listed: tuple[str, np.ndarray] | None = None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """:func:`read_known_ids` of ``candidate``, and for a listing (``listed``: its name and
    ids) which of its ids are among them (:func:`.id_lookups.listed_known`; None: no listing, or no
    known ids): what a judged run asks of the served model's known ids, in one call."""
    path = JUDGED_IDS.at(candidate)
    memory = process_memory(budget or 0)
    identity = None if memory is None else identity_of(path)
    key = (KNOWN_KIND, str(path))
    kept = memory.get(key, identity) if memory is not None and identity is not None else None
    if _written(kept):
        KNOWN_READS["kept"] += 1
        ids: np.ndarray | None = kept
    else:
        KNOWN_READS["read"] += 1
        arrays = _read(path, JUDGED_IDS)
        ids = None if arrays is None else sorted_distinct(arrays["ids"])
    if listed is None or ids is None:
        return ids, None
    return ids, id_lookups.listed_known(*listed, ids, budget)


def write_known_ids(
    candidate: Path,
    ids: np.ndarray,
    budget: int | None = None,
    listed: tuple[str, np.ndarray] | None = None,
) -> None:
    """``ids`` (hashes, any order) written as the ids the candidate's model knew; kept in
    this process's memory with the file's identity as written (``budget``: the
    request's ``keep_in_memory_bytes``; 0 keeps nothing) for :func:`read_known_ids`.
    ``listed``: a listing's name and ids, every one among ``ids`` (the next run's listing
    begins with them), its lookup kept with them for :func:`.id_lookups.listed_known`, as
    :func:`.id_lookups.remember_known` keeps one: the store asked and given to once."""
    path, written = JUDGED_IDS.at(candidate), sorted_distinct(ids)
    _write(path, JUDGED_IDS, {"ids": written})
    memory = process_memory(budget or 0)
    if memory is None:
        return
    identity = identity_of(path)
    kind = id_lookups.LOOKUP_KIND
    asked = [] if listed is None else [((kind, listed[0]), kind)]
    held = (*memory.get_each(asked), None)[0]  # None: no listing asked
    kept = np.array(written, dtype=np.uint64, copy=True)  # its own: the caller's may change
    kept.flags.writeable = False
    values = []
    if identity is not None:
        what = f"the known ids of {path}"
        values.append(KeptValue((KNOWN_KIND, str(path)), identity, kept, kept.nbytes, what))
    if listed is not None:
        name, hashes = listed
        entry = id_lookups.KnownLookup.of(hashes, kept, np.ones(len(hashes), bool), owned=(kept,))
        values.append(id_lookups.lookups_kept(name, entry, id_lookups.lookups_held(held)))
    memory.put_each(values)


KNOWN_KIND = "known ids"  # the store's key: (KNOWN_KIND, the file's path)
# Reads of a candidate's known ids: the ids this process wrote, the file unchanged
# ("kept"), or the file read and checked ("read").
KNOWN_READS: Counter[str] = Counter()


def _written(kept: object) -> TypeGuard[np.ndarray]:
    """Whether ``kept`` is known ids as :func:`write_known_ids` keeps them: a read-only
    1-D uint64 array, sorted and distinct (one pass; else it is not believed and the
    file is read)."""
    return (
        isinstance(kept, np.ndarray)
        and kept.ndim == 1
        and kept.dtype == np.uint64
        and not kept.flags.writeable
        and bool((kept[1:] > kept[:-1]).all())
    )


def sorted_distinct(ids: np.ndarray) -> np.ndarray:
    """``ids`` as uint64 hashes, sorted and distinct: as they are when they already are
    (a file :func:`write_known_ids` wrote, :func:`merged`'s answer: one pass to see it),
    else sorted (a sort of 100,000 ids is 5 ms, a run had two of them).

    >>> sorted_distinct(np.array([3, 1, 3], dtype=np.uint64)).tolist()
    [1, 3]
    """
    ids = ids.astype(np.uint64, copy=False)
    return ids if bool((ids[1:] > ids[:-1]).all()) else sorted_unique(ids)


def merged(sorted_known: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``sorted_known`` (sorted distinct hashes) and ``new``, hashes none of which it
    holds, in one sorted distinct array: the new ones sorted alone and inserted, so that
    it costs what is new and one copy of what is known (a grown pool's records are most
    of them known).

    >>> merged(np.array([2, 5], dtype=np.uint64), np.array([7, 1], dtype=np.uint64)).tolist()
    [1, 2, 5, 7]
    """
    new = sorted_unique(new.astype(np.uint64, copy=False))
    return np.insert(sorted_known, np.searchsorted(sorted_known, new), new)


def read_watch(path: Path, primary: str) -> dict[str, np.ndarray]:
    """The watch's records so far (none: absent, or unusable and set aside); a store
    written before loss columns (``served``, ``previous``: the column watched then) as
    column ``primary``'s, one before segments with every record unsegmented."""
    arrays = _read(path, JUDGED_WATCH) or {"ids": np.zeros(0, dtype=np.uint64)}
    for side in ("served", "previous"):
        if side in arrays:
            arrays[f"{side}/{primary}"] = arrays.pop(side)
    arrays.setdefault("segments", np.full(len(arrays["ids"]), "", dtype="<U1"))
    return arrays


def extend_watch(
    kept: Mapping[str, np.ndarray], new: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """``kept``'s records, then ``new``'s; a column one side lacks is NaN there."""

    def part(arrays: Mapping[str, np.ndarray], name: str) -> np.ndarray:
        return arrays[name] if name in arrays else np.full(len(arrays["ids"]), np.nan)

    return {k: np.concatenate([part(kept, k), part(new, k)]) for k in {**kept, **new}}


def write_watch(path: Path, kept: Mapping[str, np.ndarray]) -> None:
    _write(path, JUDGED_WATCH, kept)


def room(
    kept: Mapping[str, np.ndarray], columns: Collection[str], segment_chars: int, count: int
) -> int:
    """How many of ``count`` new records (with loss ``columns``, such as ``served/loss``,
    and segments of at most ``segment_chars`` characters) the watch store takes: as many
    as keep the whole store, ``kept`` and them, within :func:`decoded_bound`, the bound
    its reader holds it to. The rest are not watched (the caller says so): one pair's
    store then stops growing, its figures stand. Why not drop the oldest instead: the
    bound needs each record's place fixed before its loss is seen, and a window that
    forgets its start is another sequence."""
    floats = {*kept, *columns} - {"ids", "segments"}
    if len(floats) + 2 > MAX_MEMBERS:
        return 0
    chars = max(segment_chars, kept["segments"].dtype.itemsize // 4 if "segments" in kept else 1)
    width = 8 + 4 * chars + 8 * len(floats)  # id, segment, and each column as float64
    return max(0, min(count, decoded_bound(JUDGED_WATCH) // width - len(kept["ids"])))


def decoded_bound(file: StateFile) -> int:
    """The most bytes a store's arrays take decoded, as its reader and writer both hold
    it: the layout's bound on the file (``file.limit``) less room for the zip's and the
    members' headers (a written store's file stays within ``file.limit`` too). A member
    compresses to a few bytes whatever it declares, so the file's size alone bounds
    nothing the reader allocates: the declared sizes are checked first."""
    return file.limit - HEADER_ROOM


# Room for the headers of at most MAX_MEMBERS members (zip entries and .npy headers: a
# few hundred bytes each) within a file's bound; and the members a store may hold (ids,
# segments, and two per loss column).
HEADER_ROOM = 1 << 20
MAX_MEMBERS = 1024


def _read(path: Path, file: StateFile) -> dict[str, np.ndarray] | None:
    """Every array of the file, ``ids`` among them; None: no file, or one set aside. Read
    as a state file (agent_folder.files: a regular file within ``file.limit``, a FIFO
    never waited on), then as a zip whose every member's .npy header (kind, dtype,
    shape, and all of them together within :func:`decoded_bound`) is checked before any
    array is decoded (:func:`_check_members`)."""
    inode = None
    try:
        opened = files.open_binary(path, file.limit)
        if opened is None:
            return None
        handle, inode = opened
        with handle, zipfile.ZipFile(handle) as archive:
            return _decode(archive, file)
    # UnusableStateFile is an OSError; a torn zip (a write cut short) raises BadZipFile;
    # a damaged deflate stream zlib.error; an encrypted member RuntimeError.
    except (OSError, ValueError, KeyError, EOFError, RuntimeError, zipfile.BadZipFile,
            zlib.error) as exc:  # fmt: skip
        files.set_aside(path, file, f"{path}: {exc}", inode)
        return None


def _decode(archive: zipfile.ZipFile, file: StateFile) -> dict[str, np.ndarray]:
    """The arrays of a store's members, decoded only after :func:`_check_members`."""
    kinds = _check_members(archive, file)
    arrays = {}
    for name in kinds:
        with archive.open(f"{name}.npy") as member:
            arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
    return arrays


def _check_members(archive: zipfile.ZipFile, file: StateFile) -> list[str]:
    """The store's array names, after every member passed its header's checks: a name the
    writer gives (``ids``, and for the watch ``segments`` and the loss columns), stored
    or deflated and not encrypted, a 1-D array of the writer's dtype (ids uint64, losses
    float, segments text of at most ``SEGMENT_CHARS``), every one as long as ``ids``,
    all within :func:`decoded_bound`. Reads the headers only."""
    members = archive.infolist()
    names = [m.filename.removesuffix(".npy") for m in members]
    if len(members) > MAX_MEMBERS or len(set(names)) != len(names) or "ids" not in names:
        raise ValueError(f"holds {len(names)} member(s) {names[:6]}: not one store's arrays")
    lengths, total = set(), 0
    for info, name in zip(members, names, strict=True):
        if (
            info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
            or info.flag_bits & 1
        ):
            raise ValueError(f"{info.filename}: compressed or encrypted as numpy never writes")
        with archive.open(info) as member:
            shape, dtype = _header(info.filename, member)
        _check_dtype(name, dtype, file)
        if len(shape) != 1:
            raise ValueError(f"{info.filename}: shape {shape}, not one dimension")
        lengths.add(shape[0])
        total += shape[0] * dtype.itemsize
    if len(lengths) != 1:
        raise ValueError(f"arrays of unequal length {sorted(lengths)[:4]}")
    if total > decoded_bound(file):
        raise ValueError(f"{total} bytes decoded, over the {decoded_bound(file)}-byte bound")
    return names


def _header(name: str, member: IO[bytes]) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """The shape and dtype a member's .npy header declares (format 1.0 or 2.0, numpy's
    writer's), read alone."""
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
    else:
        raise ValueError(f"{name}: .npy format {version}, not 1.0 or 2.0")
    return tuple(shape), dtype


def _check_dtype(name: str, dtype: np.dtype[Any], file: StateFile) -> None:
    """Each array's dtype as the writers write it (a string or object array, a 0-d one,
    another kind of number is refused)."""
    if name == "ids":
        ok = dtype == np.dtype(np.uint64)
    elif file != JUDGED_WATCH:
        ok = False
    elif name == "segments":
        ok = dtype.kind == "U" and dtype.itemsize <= 4 * SEGMENT_CHARS
    else:
        side = name.split("/", 1)[0]
        ok = side in ("served", "previous") and dtype in (
            np.dtype(np.float32),
            np.dtype(np.float64),
        )
    if not ok:
        raise ValueError(f"{name}: an array of {dtype}, not one a {file.label} store holds")


def _write(path: Path, file: StateFile, arrays: Mapping[str, np.ndarray]) -> None:
    """The arrays written as :func:`_read` reads them (none over :func:`decoded_bound`
    decoded: ValueError), streamed into the file (no second copy in memory)."""
    total = sum(np.asarray(a).nbytes for a in arrays.values())
    if total > decoded_bound(file) or len(arrays) > MAX_MEMBERS:
        raise ValueError(f"{path}: {total} bytes in {len(arrays)} arrays, over the store's bound")
    files.clear_way(path, file)
    files.write_atomic(path, lambda handle: np.savez(handle, **dict(arrays)))  # type: ignore[arg-type]
