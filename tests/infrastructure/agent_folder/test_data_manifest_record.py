"""The data manifest (``data_manifest.json``) as a typed record: one written by 82eca65c's
own code (fixtures/data_manifest_82eca65c) reads with every field and writes back the same
bytes; a malformed one is refused in one line and set aside; another version is left
alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.candidates import (
    DataManifestRecord,
    read_data_manifest,
    renew_data_manifest,
    write_data_manifest,
)
from genesis_fp16_infrastructure.agent_folder.layout import DATA_MANIFEST
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.data.manifest import Manifest

FIXTURE = Path(__file__).parent / "fixtures" / "data_manifest_82eca65c" / "data_manifest.json"


def _folder(tmp_path: Path, text: str | None = None) -> Path:
    """A candidate's folder holding the fixture's record (or ``text``)."""
    folder = tmp_path / "candidates" / "c1"
    folder.mkdir(parents=True)
    if text is None:
        shutil.copy(FIXTURE, DATA_MANIFEST.at(folder))
    else:
        DATA_MANIFEST.at(folder).write_text(text)
    return folder


def _read_watched(folder: Path) -> tuple[DataManifestRecord | None, list[files.SetAside]]:
    """The folder's record as read, and the files set aside while reading it."""
    seen: list[files.SetAside] = []
    remove = files.on_set_aside(seen.append)
    try:
        return read_data_manifest(folder), seen
    finally:
        remove()


def test_a_record_written_by_82eca65c_reads_typed_and_writes_back_the_same_bytes(
    tmp_path: Path,
) -> None:
    """Its request, checkpoint, files and result read as written; written back by this
    code, the file holds the bytes 82eca65c wrote."""
    folder = _folder(tmp_path)
    record = read_data_manifest(folder)
    assert record is not None and record.version == 1
    assert record.request == {
        "agent": "se_darwin",
        "options": {"hidden": 8, "max_epochs": 2},
        "seed": 3,
    }
    assert record.checkpoint.path.endswith("20261130T050000Z-f1/ckpt-0000000008.pt")
    assert (record.checkpoint.size, record.checkpoint.mtime_ns) == (7, 1796016517972015264)
    manifest = Manifest.from_json(record.manifest)
    assert manifest is not None and [Path(f.path).name for f in manifest.files] == [
        "more.jsonl",
        "pool.json",
    ]
    result = TrainResult.from_json(record.result)
    assert (result.steps, dict(result.eval), result.live) == (8, {"loss": 0.2}, None)
    DATA_MANIFEST.at(folder).unlink()
    write_data_manifest(folder, record)
    assert DATA_MANIFEST.at(folder).read_bytes() == FIXTURE.read_bytes()


def test_a_renewed_record_changes_its_manifest_and_keeps_every_other_byte(
    tmp_path: Path,
) -> None:
    """Renewed for its own checkpoint, only ``manifest`` changes (a key a newer release
    added kept too); for another checkpoint, nothing is written."""
    data = json.loads(FIXTURE.read_text())
    folder = tmp_path / "candidates" / "c1"
    checkpoint = folder / "ckpt-0000000008.pt"
    data["checkpoint"]["path"] = str(checkpoint)
    data["newer"] = {"kept": [1, 2]}
    _folder(tmp_path, json.dumps(data))
    assert not renew_data_manifest(tmp_path / "elsewhere" / "ckpt.pt", {"files": []})
    assert renew_data_manifest(checkpoint, {"version": 1, "scanned_ns": 5, "files": []})
    renewed = json.loads(DATA_MANIFEST.at(folder).read_text())
    assert renewed == {**data, "manifest": {"version": 1, "scanned_ns": 5, "files": []}}


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: [d],  # not an object
        lambda d: {k: v for k, v in d.items() if k != "checkpoint"},
        lambda d: {**d, "checkpoint": {**d["checkpoint"], "size": "seven"}},
        lambda d: {**d, "request": None},
        lambda d: {**d, "manifest": [1]},
    ],
    ids=["list", "no_checkpoint", "size_as_text", "request_null", "manifest_list"],
)
def test_a_malformed_record_of_this_version_is_refused_in_one_line_and_set_aside(
    tmp_path: Path, damage: object
) -> None:
    """Read as unusable: None, the file renamed aside and reported once, its why one line
    naming the record."""
    data = json.loads(FIXTURE.read_text())
    folder = _folder(tmp_path, json.dumps(damage(data)))  # type: ignore[operator]
    record, seen = _read_watched(folder)
    assert record is None
    assert [e.label for e in seen] == [DATA_MANIFEST.label]
    assert "\n" not in seen[0].why and "data_manifest" in seen[0].why
    assert not DATA_MANIFEST.at(folder).exists()


def test_a_record_of_another_version_is_not_read_and_left_in_place(tmp_path: Path) -> None:
    """A version this code does not write (an older or a newer release's) reads as None
    and is not set aside: the run reads the pool, the file stays for its own release."""
    folder = _folder(tmp_path, json.dumps({"version": 2, "whatever": True}))
    record, seen = _read_watched(folder)
    assert record is None
    assert seen == [] and DATA_MANIFEST.at(folder).is_file()


def test_a_result_holding_a_str_subclass_is_written_as_its_text(tmp_path: Path) -> None:
    """A run's result may hold ``torch.__version__`` (a str subclass: a calibration's
    record held one, and every se_darwin run of the daemon failed writing its manifest);
    it is written as the plain text it is, and reads back equal. An object that is no JSON
    value is still refused."""
    import torch

    class Label(str):
        pass

    data = json.loads(FIXTURE.read_text())
    data["result"]["extra"] = {"torch": torch.__version__, "label": Label("x")}
    folder = tmp_path / "candidates" / "c1"
    folder.mkdir(parents=True)
    write_data_manifest(folder, DataManifestRecord.from_json(data))
    record = read_data_manifest(folder)
    assert record is not None
    assert record.result["extra"] == {"torch": str(torch.__version__), "label": "x"}
    data["result"]["extra"] = {"what": object()}
    with pytest.raises(TypeError, match="object"):
        write_data_manifest(folder, DataManifestRecord.from_json(data))
