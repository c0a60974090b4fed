"""Up to date by the data manifest: no parse when nothing changed, a full read otherwise.

The manifest is kept beside each candidate's checkpoint and answers only while that
checkpoint is served; a run here does what the daemon's and ``train``'s plan do: the
plugin's ``check_data`` first, then the judged run when it does not answer."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from se_darwin_runs import train

from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.agent_folder.candidates import list_candidates, served_entry
from genesis_fp16_infrastructure.agent_folder.layout import DATA_MANIFEST
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer, served_checkpoint
from genesis_fp16_infrastructure.agent_folder.repair import roll_back_by_hand, serve_by_hand
from genesis_fp16_infrastructure.agent_folder.transitions import operator_pin
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.judging.run import run_plugin
from genesis_fp16_infrastructure.recipes.retrain import freshness
from genesis_fp16_infrastructure.recipes.retrain import run as retrain_run

OPTIONS = {"max_epochs": 2, "hidden": 8, "cross_validation": False}


def _request(data: Path, ckpt: Path) -> TrainRequest:
    return TrainRequest(
        agent="se_darwin",
        precision="fp32",
        precision_reason="test",
        state_dir=ckpt.parent,
        checkpoint_dir=ckpt,
        data_path=data,
        seed=3,
        resume=True,
        options=OPTIONS,
    )


def _run(request: TrainRequest) -> TrainResult:
    """The plan's check, then the judged run when the check does not answer."""
    check = plugin.check_data(request)
    if check.up_to_date is not None:
        return TrainResult.from_json(check.up_to_date)
    return run_plugin(plugin, request)


def _record(ckpt: Path) -> Path:
    """The manifest beside the served checkpoint."""
    served = served_checkpoint(ckpt)
    assert served is not None
    return DATA_MANIFEST.at(served.parent)


def _no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the pool was read")

    monkeypatch.setattr(retrain_run, "read_trajectories", refuse)


@pytest.fixture
def served(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """A pool of two files and a model trained on it, on its own budget."""
    data = tmp_path / "pool"
    data.mkdir()
    pool = generate_pool(400, seed=2)
    (data / "pool.json").write_text(json.dumps(pool))
    (data / "more.json").write_text(json.dumps(generate_pool(100, seed=9, agent="qa")))
    for file in data.iterdir():  # written a minute ago: past the manifest's racy window
        past = file.stat().st_mtime_ns - 60 * 10**9
        os.utime(file, ns=(past, past))
    ckpt = tmp_path / "ck"
    first = train(data, ckpt, steps=None, resume=True, options=OPTIONS)
    assert first.steps > 0 and _record(ckpt).is_file()
    phases = first.phases
    # live and gate: the judged run's (the served model scored and watched; the gate)
    assert set(phases) == {"check", "read", "encode", "train", "eval", "live", "gate"}
    assert sum(phases.values()) <= first.wall_seconds  # the real time, not the trainer's
    # memory as each of the plugin's timed phases ended (eval is counted inside train)
    assert set(first.extra["peak_rss_mib"]) == set(phases) - {"eval", "live", "gate"}
    return data, ckpt, first.to_json()


def test_an_unchanged_pool_is_up_to_date_without_reading_it(
    served: tuple[Path, Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No record read, no step; the served model's stored eval reported; the real time."""
    data, ckpt, first = served
    _no_reading(monkeypatch)
    out = _run(_request(data, ckpt))
    assert out.up_to_date and out.steps == 0 and out.outcome == "up_to_date"
    assert dict(out.eval) == pytest.approx(first["eval"], nan_ok=True)
    assert str(out.checkpoint) == first["checkpoint"]
    assert out.data.change == "unchanged"
    assert out.data.checked_by == "manifest"
    assert 0 < out.wall_seconds == pytest.approx(out.phases["check"], abs=1e-6)
    # The trained run's own measurements are not this check's.
    assert not {"peak_rss_mib", "record_cache", "precision_calibration"} & set(out.extra)


def test_an_up_to_date_run_reports_the_precision_and_reason_asked_now(
    served: tuple[Path, Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served in fp32, asked bf16 now: the up-to-date result says bf16 (asked bf16) for
    today's reason, naming the served model's fp32; not the served run's fields."""
    data, ckpt, first = served
    assert first["precision_used"] == "fp32"
    _no_reading(monkeypatch)
    request = replace(_request(data, ckpt), precision="bf16", precision_reason="asked now")
    out = _run(request)
    assert out.up_to_date and out.steps == 0
    assert (out.precision_requested, out.precision_used) == ("bf16", "bf16")
    assert out.precision_reason.startswith("asked now; up to date, no step taken")
    assert "trained in fp32" in out.precision_reason


def test_a_file_rewritten_with_the_same_content_is_up_to_date(
    served: tuple[Path, Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same bytes, new mtime: hashed again, still up to date, and not hashed a third time."""
    data, ckpt, _ = served
    text = (data / "more.json").read_text()
    (data / "more.json").write_text(text)
    _no_reading(monkeypatch)
    out = _run(_request(data, ckpt))
    assert out.up_to_date and out.data.files_hashed >= 1
    assert out.up_to_date_against is not None
    assert out.up_to_date_against.startswith("nothing new: the 2 data file(s) hold the bytes")


def test_the_same_records_at_another_path_are_up_to_date_not_trained_again(
    served: tuple[Path, Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's folder moved (or a data path set to the folder its one file was in):
    the manifest's paths differ, its files' bytes and read order do not, so the plan's
    check answers up to date: nothing read, no step, no candidate (the path was part of
    the request, which trained afresh on the same records and served a model with the
    same scores)."""
    data, ckpt, first = served
    moved = data.rename(data.parent / "moved")
    _no_reading(monkeypatch)
    verdict = freshness.check_data(_request(moved, ckpt)).up_to_date
    assert verdict is not None
    why = TrainResult.from_json(verdict).up_to_date_against
    assert why is not None and why.startswith("nothing new: the 2 data file(s) hold the bytes")
    out = _run(_request(moved, ckpt))  # the new paths are trusted now: hashed no more
    assert out.up_to_date and out.steps == 0 and str(out.checkpoint) == first["checkpoint"]
    assert out.up_to_date_against == "nothing new: the 2 data file(s) are unchanged"
    assert len(list_candidates(ckpt)) == 1  # the first model's: no candidate trained


def test_an_identical_copy_in_the_pool_is_up_to_date_by_the_plans_check(
    served: tuple[Path, Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool file copied beside itself under a new name, and another renamed where it
    is read in the same order: the plan's check answers up to date (the daemon starts no
    child, no calibration), nothing read; a copy with one byte changed is read in full."""
    data, ckpt, _ = served
    (data / "pool copy.json").write_bytes((data / "pool.json").read_bytes())
    (data / "more.json").rename(data / "less.json")  # read before pool.json, as before
    with monkeypatch.context() as patched:
        _no_reading(patched)
        verdict = freshness.check_data(_request(data, ckpt)).up_to_date
        assert verdict is not None and TrainResult.from_json(verdict).steps == 0
        out = _run(_request(data, ckpt))
        assert out.up_to_date and out.data is not None and out.data.checked_by == "manifest"
    (data / "pool copy.json").write_text((data / "pool.json").read_text() + " ")
    assert freshness.check_data(_request(data, ckpt)).up_to_date is None


def test_a_malformed_file_dropped_in_is_quarantined_named_and_brings_nothing_new(
    served: tuple[Path, Path, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    """A truncated pool dropped beside the others: one log line naming the file, and no
    step (the served model knew every valid record); the next run is up to date too."""
    data, ckpt, _ = served
    (data / "broken.json").write_text('{"trajectories": {"t1": ')
    with caplog.at_level("WARNING", logger="genesis_fp16_infrastructure.data.quarantine"):
        out = _run(_request(data, ckpt))
    assert out.up_to_date and out.steps == 0
    named = [r.getMessage() for r in caplog.records if "broken.json" in r.getMessage()]
    assert len(named) == 1 and named[0].startswith("quarantined data file ")
    assert _run(_request(data, ckpt)).up_to_date


def test_a_record_edited_in_place_is_seen_and_learned(
    served: tuple[Path, Path, dict[str, Any]],
) -> None:
    """Same id, same label, another planned change: the check reads the pool, and the run
    counts the record as changed and trains afresh."""
    data, ckpt, _ = served
    pool = json.loads((data / "more.json").read_text())
    record = next(iter(pool["trajectories"].values()))
    record["code_changes"] = record.get("code_changes", "") + "\n+one more line"
    (data / "more.json").write_text(json.dumps(pool))
    assert freshness.check_data(_request(data, ckpt)).up_to_date is None
    out = _run(_request(data, ckpt))
    assert not out.up_to_date and out.steps > 0
    assert out.data is not None and out.data.relabelled == 1 and out.data.new == 0
    # The untouched file came from the record cache; the edited one was parsed. Its
    # numeric rows were worked out again, with the few around it; the rest were kept.
    counts = out.extra["record_cache"]
    assert counts == {
        "files_cached": 1,
        "files_read": 1,
        "files_continued": 0,
        "write_failures": 0,
        "entries_unreadable": 0,
        "pool_cached": 0,
        "files_from_memory": 0,  # train in its own process: nothing kept
        "numeric_reused": counts["numeric_reused"],
        "numeric_computed": counts["numeric_computed"],
        "numeric_unreadable": 0,
        "numeric_write_failures": 0,
        "numeric_appended": 0,  # a relabelled record: the file written whole
        "numeric_spliced": 0,
        "numeric_from_memory": 0,
        "numeric_written": 0,
    }
    assert 1 <= counts["numeric_computed"] < counts["numeric_reused"] // 10


def test_an_appended_file_and_another_request_are_not_up_to_date(
    served: tuple[Path, Path, dict[str, Any]],
) -> None:
    """A new file in the pool, or other options than the served run's: the check says
    nothing (None) and the run reads the pool."""
    data, ckpt, _ = served
    other = replace(_request(data, ckpt), options={**OPTIONS, "hidden": 16})
    assert freshness.check_data(other).up_to_date is None
    (data / "new.json").write_text(json.dumps(generate_pool(20, seed=4, agent="new")))
    assert freshness.check_data(_request(data, ckpt)).up_to_date is None


def test_a_budget_on_an_unchanged_pool_is_answered_by_the_manifest_unless_forced(
    served: tuple[Path, Path, dict[str, Any]],
) -> None:
    """steps asked (a daemon's STEPS setting): a budget sizes a run on new data, so an
    unchanged pool is up to date; only a forced run (train --resume --steps) trains."""
    data, ckpt, _ = served
    budget = replace(_request(data, ckpt), steps=20)
    verdict = freshness.check_data(budget).up_to_date
    assert verdict is not None
    fresh = TrainResult.from_json(verdict)
    assert fresh.up_to_date and fresh.steps == 0
    assert fresh.data is not None and fresh.data.checked_by == "manifest"
    assert freshness.check_data(replace(budget, forced=True)).up_to_date is None


def test_a_record_kept_for_the_sample_file_answers_for_its_folder(
    served: tuple[Path, Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state folder from before the folder default: its manifest's request names the
    data path (the key held it then) and lists the files by the paths the folder lists
    them by, so a run on the folder is up to date by the manifest, nothing read."""
    data, ckpt, _ = served
    record = json.loads(_record(ckpt).read_text())
    record["request"]["data_path"] = str((data / "pool.json").resolve())
    _record(ckpt).write_text(json.dumps(record))
    _no_reading(monkeypatch)
    out = _run(_request(data, ckpt))
    assert out.up_to_date and out.data is not None and out.data.checked_by == "manifest"
    other = {**record["request"], "seed": 4}  # what still tells requests apart
    assert not freshness.same_request(other, freshness.request_key(_request(data, ckpt)))


def test_after_a_rollback_the_candidates_bytes_are_answered_by_the_plan(
    served: tuple[Path, Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 69: new records train a candidate, the operator serves it and rolls back: the
    files hold the bytes that candidate read, so the plan answers up to date (no child, no
    read); its data report counts the records as they are; a byte more, and it does not."""
    data, ckpt, first = served
    (data / "new.json").write_text(json.dumps(generate_pool(60, seed=4, agent="new")))
    grown = _run(_request(data, ckpt))
    assert grown.steps > 0
    (candidate,) = [
        c for c in list_candidates(ckpt) if str(c) != str(Path(first["checkpoint"]).parent)
    ]
    entry = served_entry(ckpt, candidate)
    assert entry is not None
    serve_by_hand(ckpt, entry, operator_pin("model promote"))
    roll_back_by_hand(ckpt, operator_pin("model rollback"))
    pointer = read_pointer(ckpt)
    assert pointer is not None and pointer.pinned and pointer.served.id != candidate.name
    _no_reading(monkeypatch)
    answer = freshness.check_data(_request(data, ckpt)).up_to_date
    assert answer is not None, "the plan read the pool: a child would start"
    out = TrainResult.from_json(answer)
    assert out.up_to_date and out.steps == 0 and candidate.name in str(out.up_to_date_against)
    assert out.data is not None and out.data.records == grown.data.records
    assert str(out.checkpoint) == first["checkpoint"]
    (data / "new.json").write_text(json.dumps(generate_pool(61, seed=4, agent="new")))
    assert freshness.check_data(_request(data, ckpt)).up_to_date is None


def test_a_grown_files_prefix_crosses_to_the_run_but_is_never_saved(tmp_path: Path) -> None:
    """A grown .jsonl file's prefix is in the scan's JSON (the run's record cache continues
    the file from it) and never in data_manifest.json: six fields a file there, as before."""
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "a.jsonl").write_text('{"id": 1}\n')
    first, _ = scan_files(pool)
    with open(pool / "a.jsonl", "a") as handle:
        handle.write('{"id": 2}\n')
    grown, _ = scan_files(pool, first)
    assert [len(f) for f in grown.to_json()["files"]] == [7]
    trained = tmp_path / "ck" / "ckpt.pt"
    trained.parent.mkdir()
    trained.write_bytes(b"weights")
    result = cast(TrainResult, SimpleNamespace(stopped_early=False, to_json=dict))
    freshness.save_record(_request(pool, trained.parent), grown, result, trained)
    saved = json.loads(DATA_MANIFEST.at(trained.parent).read_text())["manifest"]
    assert [len(f) for f in saved["files"]] == [6]


@pytest.mark.parametrize("result", ["absent", [1, 2], "text"])
def test_a_data_manifest_without_a_result_object_is_set_aside_and_the_pool_read(
    served: tuple[Path, Path, dict[str, Any]], result: object
) -> None:
    """A record of this version whose result is missing or not an object (hand-edited):
    the plan's check reads it as unusable, sets it aside and lets the run read the pool;
    it once raised a KeyError out of the check."""
    data, ckpt, _ = served
    path = _record(ckpt)
    record = json.loads(path.read_text())
    if result == "absent":
        del record["result"]
    else:
        record["result"] = result
    path.write_text(json.dumps(record))
    check = plugin.check_data(_request(data, ckpt))
    assert check.up_to_date is None  # not answered from the damaged record
    assert not path.exists()
    assert [p.name for p in path.parent.glob(f"{path.name}.unusable-*")]
