"""benchmarks/gpu_vs_cpu.py: its CPU half runs the product's train command for real, and
its table, ratios and JSON have the shape the GPU check reads (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_module import load_script

TREE = Path(__file__).resolve().parents[1]
SCRIPT = TREE / "benchmarks" / "gpu_vs_cpu.py"


def _script() -> ModuleType:
    return load_script(SCRIPT)


def _row(device: str, run: str, process: float, wall: float) -> dict[str, Any]:
    phases = dict.fromkeys(("start", "check", "read", "encode", "calib", "steps", "eval", "other"))
    return {
        "records": 2000,
        "device": device,
        "run": run,
        "exit_code": 0,
        "process_seconds": process,
        "wall_seconds": wall,
        "steps": 8,
        "precision": "fp32",
        "record_cache": None,
        "phases": phases,
    }


def test_ratios_are_cpu_over_gpu_per_records_and_run() -> None:
    """CPU ÷ GPU of the process wall and of wall_seconds, one per cold/warm pair; a
    failed run gives no ratio."""
    gpu_vs_cpu = _script()
    rows = [
        _row("cuda", "cold", 10.0, 4.0),
        _row("cpu", "cold", 15.0, 12.0),
        _row("cuda", "warm", 5.0, 2.0),
        {**_row("cpu", "warm", 9.0, 8.0), "exit_code": 1},
    ]
    found = gpu_vs_cpu.ratios(rows)
    assert found == [{"records": 2000, "run": "cold", "process": 1.5, "run_wall": 3.0}]
    assert "| 2,000 | cold | 1.50x | 3.00x |" in gpu_vs_cpu.table(rows, found)


def test_split_takes_calibration_out_of_the_train_phase() -> None:
    """start = process wall less wall_seconds; steps = train less a measured calibration;
    a cached calibration costs 0; other = what no named phase holds."""
    gpu_vs_cpu = _script()
    result = {
        "wall_seconds": 10.0,
        "phases": {"check": 0.5, "read": 1.0, "encode": 0.5, "train": 7.0, "eval": 0.5},
        "precision_calibration": {"seconds": 2.0, "cached": False},
    }
    split = gpu_vs_cpu.split(13.0, result)
    assert split == {
        "start": 3.0,
        "check": 0.5,
        "read": 1.0,
        "encode": 0.5,
        "calib": 2.0,
        "steps": 5.0,
        "eval": 0.5,
        "other": pytest.approx(0.5),
    }
    cached = {**result, "precision_calibration": {"seconds": 2.0, "cached": True}}
    assert gpu_vs_cpu.split(13.0, cached)["calib"] == 0.0
    assert gpu_vs_cpu.split(13.0, {**result, "precision_calibration": None})["calib"] is None


@pytest.mark.slow
def test_the_cpu_half_runs_the_product_and_writes_its_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """2,000 records, 8 steps, cuda and cpu asked on a host made to have no CUDA: the cuda
    half is left out and said so, the cpu's cold and warm runs succeed (the warm one from
    the record cache), and the JSON names the command, the machine and every phase."""
    gpu_vs_cpu = _script()
    real_probe = gpu_vs_cpu.probe_cuda
    monkeypatch.setattr(gpu_vs_cpu, "probe_cuda", lambda cwd: {**real_probe(cwd), "cuda": False})
    out = tmp_path / "figures.json"
    args = ["--records", "2000", "--steps", "8", "--devices", "cuda", "cpu"]
    gpu_vs_cpu.main([*args, "--pool-dir", str(tmp_path / "pools"), "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["notes"] == ["no CUDA device here: the cuda half was not run, no ratio"]
    assert report["ratios"] == []
    runs = report["runs"]
    assert [(r["device"], r["run"]) for r in runs] == [("cpu", "cold"), ("cpu", "warm")]
    for row in runs:
        assert row["exit_code"] == 0, row.get("error")
        assert row["steps"] == 8
        assert row["command"].startswith("genesis-fp16 train se_darwin --data ")
        assert set(row["phases"]) == set(gpu_vs_cpu.PHASES)
        assert row["phases"]["start"] > 0 and row["phases"]["steps"] > 0
    assert runs[0]["record_cache"]["files_read"] == 1
    assert runs[1]["record_cache"]["files_cached"] == 1
    assert {"cpu", "cores", "load_before", "torch"} <= set(report["machine"])
    shown = capsys.readouterr().out
    assert "| 2,000 | cpu | cold | 0 | 8 |" in shown
    assert "the cuda half was not run" in shown
