"""`genesis-fp16 probe` as a user runs it: a real subprocess, a real plugin, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_fork import run_cli

from genesis_fp16.cli import main

ROOT = Path(__file__).resolve().parents[3]
PROBE_PLUGIN = Path(__file__).resolve().parents[1] / "probe_plugin"


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env["PYTHONPATH"] = os.pathsep.join([str(PROBE_PLUGIN), str(ROOT)])
    return run_cli(
        ["probe", *args],
        cwd=ROOT,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_probe_json_and_out_folder(tmp_path: Path) -> None:
    """--json prints one object last, with a verdict per variant; --out writes JSON and PNG."""
    data = _toy_plugin().generate_sample_data(tmp_path, 64, seed=3)
    out_dir = tmp_path / "out"
    done = _probe("probe_toy", "--steps", "2", "--data", str(data), "--json", "--out", str(out_dir))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["agent"] == "probe_toy"
    assert {"verdict", "recommended", "variants", "noise_floor", "reasons"} <= set(out)
    names = [v["name"] for v in out["variants"]]
    assert names[:2] == ["fp32", "fp32_repeat"]
    assert {"bf16_autocast", "fp16_autocast", "bf16_pure", "fp16_autocast+fp32[head]"} <= set(names)
    assert set(out["verdict"].values()) <= {"green", "amber", "red"}
    assert out["recommended"] in names
    fp16 = next(v for v in out["variants"] if v["name"] == "fp16_autocast")
    assert fp16["measures"]["scale_halvings"] is not None
    assert json.loads(Path(out["files"]["json"]).read_text())["recommended"] == out["recommended"]
    png = Path(out["files"]["plot"])
    assert png.parent == out_dir
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _toy_plugin() -> Any:
    sys.path.insert(0, str(PROBE_PLUGIN))
    try:
        from probe_toy_agent import plugin
    finally:
        sys.path.remove(str(PROBE_PLUGIN))
    return plugin


def test_unknown_agent_is_a_usage_error_listing_known_agents() -> None:
    """An unknown agent exits 2 with one line naming it and the agents that exist."""
    done = _probe("no_such_agent")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "unknown agent 'no_such_agent'" in lines[0]
    assert "probe_toy" in lines[0]


def test_bad_arguments_are_rejected_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--steps 0 and a missing --data file are refused with the value named, exit code 2."""
    with pytest.raises(SystemExit) as exited:
        main(["probe", "probe_toy", "--steps", "0"])
    assert exited.value.code == 2
    assert "0: must be at least 1" in capsys.readouterr().err
    assert main(["probe", "probe_toy", "--data", str(tmp_path / "none.pt")]) == 2
    assert "none.pt: no such file or folder" in capsys.readouterr().err
