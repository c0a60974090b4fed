"""A fault bundle: one optimizer step that went non-finite, saved so it can be run again.

A bundle is one ``torch.save`` file of plain data and tensors (``weights_only``-safe):
the step's micro-batches (on the CPU), the trainer state before the step (model,
optimizers, schedulers, scaler, RNG: ``Trainer.state_dict()``), what the step gave
(each micro-batch's loss bits, whether its gradients were finite), where it ran, what
rebuilds the step without the run's data (``rebuild``: the task's ``replay_spec()``) and
a signature of that data (``data``: :func:`data_signature`)::

    path = save_bundle(folder, bundle, BundleLimits(max_count=20, max_bytes=2**30))
    bundle = load_bundle(path)      # BundleError, one line, for a damaged file
    for row in list_bundles(folder): print(row["name"], row["reason"], row["step"])
    bundle.data_change()            # None: the data its run read is unchanged
    report = bundle.replay(task)    # the step again (training.flight.replay)

The folder is bounded: after each save the oldest bundles go until at most
``max_count`` files and ``max_bytes`` bytes remain (the newest is always kept, even
alone over the byte bound: it is the one an operator asked for).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from genesis_fp16_infrastructure.errors import BundleError
from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.training.flight.bundle_files import BundleLimits, save_into

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.training.run.task import TrainingTask

BUNDLE_VERSION = 1
# Keys every bundle holds; load_bundle refuses a file without them.
REQUIRED = (
    "version",
    "reason",
    "step",
    "precision",
    "execution",
    "device",
    "torch",
    "config",
    "state",
    "batches",
    "recorded",
)


def save_bundle(folder: Path, bundle: Mapping[str, Any], limits: BundleLimits) -> Path:
    """Write ``bundle`` into ``folder`` atomically, then trim the folder; its path."""
    data = {"version": BUNDLE_VERSION, **bundle}
    write = functools.partial(torch.save, data)
    return save_into(folder, int(bundle["step"]), str(bundle["reason"]), limits, write)


class FaultBundle(dict[str, Any]):
    """A loaded bundle (its keys: :data:`REQUIRED`): its data checked, its step replayed."""

    def data_change(self) -> str | None:
        """One line saying how the data the bundle names differs from what its run read
        (gone, changed, or not checkable); None when it is the same."""
        recorded = self.get("data")
        if not recorded or "path" not in recorded:
            return "the bundle records no data signature: its data cannot be checked"
        now = data_signature(str(recorded["path"]))
        assert now is not None
        if "error" in now:
            return f"the bundle's data {recorded['path']} is gone ({now['error']})"
        if now.get("bytes") != recorded.get("bytes") or now.get("sha256") != recorded.get("sha256"):
            return f"the bundle's data {recorded['path']} has changed since its run read it"
        return None

    def replay(
        self,
        task: TrainingTask,
        batch_types: Sequence[type] = (),
        precision: PrecisionName | None = None,
        device: str | None = None,
        against_fp32: float | None = None,
    ) -> dict[str, Any]:
        """The step's replay report (:mod:`.replay`, imported on first use), rebuilt by ``task``."""
        from genesis_fp16_infrastructure.training.flight.replay import ReplayTarget, replay

        target = ReplayTarget.of_task(task, batch_types)
        return replay(self, target, precision, device, against_fp32)


def load_bundle(path: Path, max_bytes: int | None = None) -> FaultBundle:
    """The bundle at ``path``, its tensors on the CPU (where RNG states must be; a replay
    moves the rest where it runs); :class:`BundleError` (one line naming the file and why)
    for anything that is not an intact bundle.

    Nothing in the file runs: a link, a folder or a file over the bound is refused before
    it is opened, a file that is not a zip archive (a bare pickle) before torch reads it,
    and the archive itself is read with ``weights_only=True`` (tensors and plain data;
    a pickled object of any other class is refused, not built)."""
    limit = BundleLimits().max_file_bytes if max_bytes is None else max_bytes
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError as error:
        raise BundleError(f"{path}: cannot be read ({error.strerror})") from None
    if stat.S_ISLNK(info.st_mode):
        raise BundleError(f"{path}: a symbolic link, not a bundle file (give the file itself)")
    if not stat.S_ISREG(info.st_mode):
        raise BundleError(f"{path}: not a regular file")
    if info.st_size > limit:
        raise BundleError(f"{path}: {info.st_size} bytes, over the {limit}-byte bound")
    with open(path, "rb") as head:
        if head.read(4) != _ZIP_MAGIC:
            raise BundleError(f"{path}: not a fault bundle (not a torch.save zip archive)")
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols: one line only
            warnings.simplefilter("ignore")
            data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated zip, a pickle of other objects, ...
        raise BundleError(f"{path}: not an intact fault bundle ({_load_reason(error)})") from None
    if not isinstance(data, dict) or any(k not in data for k in REQUIRED):
        raise BundleError(f"{path}: not a fault bundle (keys missing)")
    if data["version"] != BUNDLE_VERSION:
        raise BundleError(
            f"{path}: bundle version {data['version']!r}, this reads {BUNDLE_VERSION}"
        )
    return FaultBundle(data)


_ZIP_MAGIC = b"PK\x03\x04"


def _load_reason(error: Exception) -> str:
    """torch.load's error as a short reason: its messages run to paragraphs."""
    text = str(error)
    found = re.search(r"GLOBAL [\w.]+|[Uu]nsupported operand \d+", text)
    if found:
        return f"it holds a pickled object, not plain data ({found.group(0)}); not loaded"
    if "central directory" in text or "zip archive" in text:
        return "a damaged or truncated zip archive"
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return f"{type(error).__name__}: {first[:160]}"


# A data file or folder over this many bytes is not hashed on the fault path: its size
# and its files' sizes are kept instead (a bundle is written in the middle of a run).
HASH_MAX_BYTES = 2**30


def data_signature(path: str | Path | None) -> dict[str, Any] | None:
    """What a bundle keeps of the data its run read, to tell later whether that data is
    still there and the same: the path, its bytes and a SHA-256 of its contents (a
    folder's: of each file's relative name and contents, in name order). None: no path."""
    if path is None:
        return None
    root = Path(path)
    if not (root.is_file() or root.is_dir()):  # gone, or a device, a pipe: never read
        return {"path": str(root), "error": "not a file or folder"}
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    try:
        total = sum(p.stat().st_size for p in files)
        digest = hashlib.sha256()
        for file in files if total <= HASH_MAX_BYTES else []:
            digest.update(str(file.relative_to(root) if root.is_dir() else "").encode())
            with open(file, "rb") as f:
                while chunk := f.read(2**20):
                    digest.update(chunk)
    except OSError as error:
        return {"path": str(root), "error": error.strerror or str(error)}
    hashed = total <= HASH_MAX_BYTES
    return {"path": str(root), "bytes": total, "sha256": digest.hexdigest() if hashed else None}
