"""The data manifest kept beside a served model's checkpoint (``data_manifest.json``):
what its run read, for a later run's plan to call the same files up to date without
parsing them (a plugin that keeps one: the retrain recipe's freshness writes and reads it).

The judged run renews it when it finds nothing new after reading (:func:`renew`): the
files changed (a copy, a quarantined file dropped in) but the served model knew every
record, so the next plan answers from the manifest instead of reading them again."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import DATA_MANIFEST

RECORD_VERSION = 1


def load(folder: Path) -> dict[str, Any] | None:
    """The folder's record; None when absent, of another version, or unusable (set aside
    as ``data_manifest.json.unusable-*`` and reported: the run reads the pool)."""
    record = files.load(DATA_MANIFEST.at(folder), DATA_MANIFEST, files.json_object)
    return record if record is not None and record.get("version") == RECORD_VERSION else None


def write(folder: Path, record: Mapping[str, Any]) -> None:
    text = json.dumps(record, sort_keys=True)
    files.write_bytes(DATA_MANIFEST.at(folder), DATA_MANIFEST, text.encode("utf-8"))


def renew(checkpoint: Path, manifest: Mapping[str, Any]) -> bool:
    """The record beside ``checkpoint`` now vouches for ``manifest`` (the files as this
    run's plan scanned them), when it is that checkpoint's record; False when there is
    none to renew."""
    folder = Path(checkpoint).parent
    record = load(folder)
    recorded = record.get("checkpoint") if record is not None else None
    if record is None or not isinstance(recorded, Mapping):
        return False
    if Path(str(recorded.get("path"))).resolve() != Path(checkpoint).resolve():
        return False
    write(folder, {**record, "manifest": dict(manifest)})
    return True
