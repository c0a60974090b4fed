"""`genesis-fp16 probe` as a user runs it: a real subprocess, a real plugin, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE_PLUGIN = Path(__file__).resolve().parent / "probe_plugin"


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env["PYTHONPATH"] = os.pathsep.join([str(PROBE_PLUGIN), str(ROOT)])
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "probe", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_probe_json_and_out_folder(tmp_path: Path) -> None:
    """--json prints one object last, with a verdict per variant; --out writes JSON and PNG."""
    done = _probe("probe_toy", "--steps", "2", "--json", "--out", str(tmp_path))
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
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_probe_table_reads_from_a_data_file(tmp_path: Path) -> None:
    """Without --json the table names every variant and the recommendation; --data is used."""
    sys.path.insert(0, str(PROBE_PLUGIN))
    try:
        from probe_toy_agent import plugin
    finally:
        sys.path.remove(str(PROBE_PLUGIN))
    data = plugin.generate_sample_data(tmp_path, 64, seed=3)
    done = _probe("probe_toy", "--steps", "1", "--data", str(data))
    assert done.returncode == 0, done.stderr
    assert "fp16_autocast+fp32[loss]" in done.stdout
    assert "recommended: " in done.stdout
    assert "minibatch noise floor" in done.stdout


def test_unknown_agent_is_a_usage_error_listing_known_agents() -> None:
    """An unknown agent exits 2 with one line naming it and the agents that exist."""
    done = _probe("no_such_agent")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "unknown agent 'no_such_agent'" in lines[0]
    assert "probe_toy" in lines[0]


def test_bad_arguments_are_rejected_before_anything_runs(tmp_path: Path) -> None:
    """--steps 0 and a missing --data file are refused with the value named."""
    steps = _probe("probe_toy", "--steps", "0")
    assert steps.returncode == 2 and "0: must be at least 1" in steps.stderr
    missing = _probe("probe_toy", "--data", str(tmp_path / "none.pt"))
    assert missing.returncode == 2 and "none.pt: no such file" in missing.stderr
