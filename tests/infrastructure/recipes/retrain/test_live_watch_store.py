"""The live watch's store (``live-<id>.npz``) is a state file like any other: a damaged
one is set aside, reported once and named, and the watch starts again; its decoded size
is bounded on the members' headers, before any array is read; NaN never enters it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from se_darwin_runs import train

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.lifecycle import (
    candidate_entry,
    candidates_dir,
    newest_checkpoint,
    serve,
)
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import live_watch
from genesis_fp16_infrastructure.recipes.retrain.live_watch import (
    MAX_RECORDS,
    _read_store,
    _usable,
    _write_store,
)

ROOT = Path(__file__).resolve().parents[4]
POOL = generate_pool(1200, seed=2)
IDS = list(POOL["trajectories"])


def _arrays(n: int = 3, **edits: np.ndarray) -> dict[str, np.ndarray]:
    """A store's arrays as the writer keeps them: ``n`` records, two segments."""
    kept = {
        "ids": np.arange(n, dtype=np.int64),
        "served": np.full(n, 0.25, dtype=np.float32),
        "previous": np.full(n, 0.5, dtype=np.float32),
        "labels": np.ones(n, dtype=np.float32),
        "segment": np.arange(n, dtype=np.int32) % 2,
        "segment_names": np.array(["se_darwin", "qa"], dtype=live_watch._NAME_DTYPE),
    }
    return {**kept, **edits}


def _savez(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def _header_only(shape: tuple[int, ...]) -> bytes:
    """A store whose members' headers claim ``shape`` and hold no data at all."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for key, dtype in live_watch._DTYPES.items():
            member = io.BytesIO()
            header = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape}
            np.lib.format.write_array_header_1_0(member, header)
            archive.writestr(f"{key}.npy", member.getvalue())
        archive.writestr("segment_names.npy", _names())
    return buffer.getvalue()


def _names() -> bytes:
    """A names member holding one segment's name."""
    buffer = io.BytesIO()
    np.save(buffer, np.array(["se_darwin"], dtype=live_watch._NAME_DTYPE))
    return buffer.getvalue()


def _npy() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.arange(3, dtype=np.int64))
    return buffer.getvalue()


DAMAGED: dict[str, Callable[[], bytes]] = {
    "truncated_zip": lambda: _savez(_arrays(50))[:700],
    "npy_under_npz_name": _npy,
    "zero_d": lambda: _savez({k: v[0] for k, v in _arrays().items()}),
    "two_d": lambda: _savez({k: v.reshape(len(v), 1) for k, v in _arrays().items()}),
    "strings": lambda: _savez(_arrays(ids=np.array(["a", "b", "c"]))),
    "header_of_10e12": lambda: _header_only((10**12,)),
    "nan_scores": lambda: _savez(_arrays(served=np.array([0.2, np.nan, 0.3], np.float32))),
    "inf_labels": lambda: _savez(_arrays(labels=np.array([1, np.inf, 0], np.float32))),
    "unequal_lengths": lambda: _savez(_arrays(labels=np.ones(2, dtype=np.float32))),
    "a_member_missing": lambda: _savez({k: v for k, v in _arrays().items() if k != "ids"}),
    "segment_past_names": lambda: _savez(_arrays(segment=np.array([0, 1, 2], np.int32))),
    "names_of_objects": lambda: _savez(_arrays(segment_names=np.array([1.5, 2.5]))),
}


def _events() -> tuple[list[files.SetAside], Callable[[], None]]:
    seen: list[files.SetAside] = []
    return seen, files.on_set_aside(seen.append)


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_a_damaged_store_is_set_aside_once_named_and_the_watch_restarts(
    tmp_path: Path, kind: str
) -> None:
    """Each damaged kind: the reader returns an empty watch (no exception), sets the file
    aside once under the label live_watch, and the reason names the file."""
    path = tmp_path / "live-c0.npz"
    path.write_bytes(DAMAGED[kind]())
    seen, remove = _events()
    try:
        kept = _read_store(path)
    finally:
        remove()
    assert all(len(v) == 0 for v in kept.values())
    assert sorted(kept) == sorted([*live_watch._ARRAYS, live_watch._NAMES])
    assert [(e.path, e.label) for e in seen] == [(path, "live_watch")]
    assert str(path) in seen[0].why
    assert seen[0].aside is not None and seen[0].aside.is_file() and not path.exists()


def test_the_writers_own_store_reads_back_unchanged(tmp_path: Path) -> None:
    """The checks refuse nothing the writer writes: a store round-trips, nothing set aside."""
    path = tmp_path / "live-c0.npz"
    written = _arrays(7, served=np.linspace(0.1, 0.9, 7, dtype=np.float32))
    _write_store(path, written)
    seen, remove = _events()
    try:
        kept = _read_store(path)
    finally:
        remove()
    assert seen == []
    for key, value in written.items():
        assert kept[key].dtype == value.dtype and np.array_equal(kept[key], value)


def test_a_store_written_before_segments_reads_as_one_segment(tmp_path: Path) -> None:
    """A store of the four arrays kept before segments is read, not set aside: every
    record in the one segment UNSEGMENTED, and the writer then keeps the segments."""
    path = tmp_path / "live-c0.npz"
    old = {k: v for k, v in _arrays(5).items() if k not in ("segment", "segment_names")}
    path.write_bytes(_savez(old))
    seen, remove = _events()
    try:
        kept = _read_store(path)
    finally:
        remove()
    assert seen == [] and list(kept["ids"]) == [0, 1, 2, 3, 4]
    assert list(kept["segment"]) == [0] * 5
    assert list(kept["segment_names"]) == [live_watch.UNSEGMENTED]
    _write_store(path, kept)
    assert sorted(np.load(path).files) == sorted([*live_watch._ARRAYS, live_watch._NAMES])


@pytest.fixture(scope="module")
def twenty_million(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real store of 20 M records (zeros), deflated: 400 MB decoded, a small file."""
    path = tmp_path_factory.mktemp("store") / "live-c0.npz"
    n, chunk = 20_000_000, 1 << 20
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for key, dtype in live_watch._DTYPES.items():
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                header = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": (n,)}
                np.lib.format.write_array_header_1_0(member, header)
                zeros = bytes(chunk * np.dtype(dtype).itemsize)
                for start in range(0, n, chunk):
                    member.write(
                        zeros[: (min(n, start + chunk) - start) * np.dtype(dtype).itemsize]
                    )
        archive.writestr("segment_names.npy", _names())
    return path


def test_a_store_of_twenty_million_records_is_refused_before_any_array_is_read(
    twenty_million: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is on the decoded size: a 20 M-record store, under 2 MB on disk, is set
    aside on its headers; numpy's array reader is never called on it."""
    assert os.path.getsize(twenty_million) < 2 * 1024 * 1024 and MAX_RECORDS < 20_000_000
    reads: list[object] = []
    real = np.lib.format.read_array
    monkeypatch.setattr(
        np.lib.format, "read_array", lambda *a, **k: reads.append(a) or real(*a, **k)
    )
    seen, remove = _events()
    try:
        kept = _read_store(twenty_million)
    finally:
        remove()
    assert reads == [] and len(kept["ids"]) == 0
    assert len(seen) == 1 and "20000000 records, over the bound" in seen[0].why


def test_nan_and_inf_scores_are_refused_at_the_write(tmp_path: Path) -> None:
    """The writer refuses a non-finite score (nothing written), and the watch's filter
    leaves such records out, counting them, and stops at the store's room."""
    path = tmp_path / "live-c0.npz"
    with pytest.raises(ValueError, match="NaN or infinite"):
        _write_store(path, _arrays(previous=np.array([0.1, np.inf, 0.2], np.float32)))
    assert not path.exists()
    scored = _arrays(4, served=np.array([0.1, np.nan, 0.2, 0.3], np.float32))
    usable, refused = _usable(scored, room=2)
    assert list(usable["ids"]) == [0, 2] and refused is not None and refused[0] == 2
    assert _usable(_arrays(4), room=4)[1] is None


def _write_batch(folder: Path, name: str, keys: list[str]) -> None:
    part = {**POOL, "trajectories": {k: POOL["trajectories"][k] for k in keys}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(part))


@pytest.fixture
def watched(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two trained models, the second served over the first by hand: the watch's pair;
    returns the pool, the checkpoint folder and the pair's store (not yet written)."""
    pool, ck = tmp_path / "pool", tmp_path / "state" / "agents" / "se_darwin" / "checkpoints"
    _write_batch(pool, "b0", IDS[:500])
    first = train(pool, ck)
    _write_batch(pool, "b1", IDS[500:800])
    second = train(pool, ck, resume=True)
    candidate = candidates_dir(ck) / str(second.extra["candidate"])
    checkpoint = newest_checkpoint(candidate)
    assert checkpoint is not None
    serve(ck, candidate_entry(ck, candidate, checkpoint), "manual")
    _write_batch(pool, "b2", IDS[800:1000])
    return pool, ck, candidate / f"live-{first.extra['candidate']}.npz"


def test_a_run_over_a_damaged_store_succeeds_and_restarts_the_watch(
    watched: tuple[Path, Path, Path],
) -> None:
    """Through the real consumer (a run of the plugin): a truncated store costs no failed
    run; it is set aside once, and the watch counts the new records from zero."""
    pool, ck, store = watched
    store.write_bytes(DAMAGED["truncated_zip"]())
    seen, remove = _events()
    try:
        result = train(pool, ck, resume=True, steps=1)
    finally:
        remove()
    assert result.outcome != "failed"
    assert [e.label for e in seen if e.path == store] == ["live_watch"]
    live = result.live
    assert live is not None
    assert live.records == live.new_records > 0 and np.isfinite(live.difference)
    assert len(_read_store(store)["ids"]) == live.records


def test_a_train_child_over_a_damaged_store_succeeds_and_reports_it_once(
    watched: tuple[Path, Path, Path],
) -> None:
    """`genesis-fp16 train` as a real subprocess over a store whose header claims 10^12
    records: exit 0, no traceback, one set-aside line for the daemon naming the file."""
    pool, ck, store = watched
    store.write_bytes(DAMAGED["header_of_10e12"]())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(GENESIS_FP16_STATE_DIR=str(ck.parents[2]), PYTHONPATH=str(ROOT))
    args = ["train", "se_darwin", "--data", str(pool), "--steps", "1", "--json-progress"]
    proc = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=ck.parents[3],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"set_aside"')]
    assert [x["set_aside"] for x in lines] == [{"path": str(store), "file": "live_watch"}]
    assert str(store) in proc.stderr + proc.stdout  # the log line names it
