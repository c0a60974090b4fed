"""`genesis-fp16 data generate` as a real subprocess: layout, determinism, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_fork import run_cli

ROOT = Path(__file__).resolve().parents[3]


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env["PYTHONPATH"] = str(ROOT)
    return run_cli(
        ["data", "generate", *args],
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_generate_writes_the_pool_layout_deterministically(tmp_path: Path) -> None:
    """Two runs with one seed write the same bytes at trajectory_pools/se_darwin/..."""
    paths = []
    for name in ("a", "b"):
        proc = _cli(tmp_path, "--agent", "se_darwin", "--out", str(tmp_path / name),
                    "--count", "60", "--seed", "3")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        paths.append(Path(proc.stdout.strip()))
    assert paths[0] == tmp_path / "a" / "trajectory_pools" / "se_darwin" / "trajectory_pool.json"
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert len(json.loads(paths[0].read_text())["trajectories"]) == 60


def test_generate_rejects_bad_input_in_one_line(tmp_path: Path) -> None:
    """An unknown agent (known ones listed) and a zero count exit 2 with one line."""
    for args, fragment in (
        (("--agent", "nobody", "--out", str(tmp_path)), "known agents: "),
        (("--agent", "se_darwin", "--out", str(tmp_path), "--count", "0"), "--count 0"),
    ):
        proc = _cli(tmp_path, *args)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0], proc.stderr


def test_positional_agent_and_the_daemons_sample_count(tmp_path: Path) -> None:
    """`data generate AGENT` works positionally, and --count defaults to the daemon's count."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(PYTHONPATH=str(ROOT), GENESIS_FP16_SAMPLE_COUNT="40")
    proc = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "data", "generate", "se_darwin", "--out",
         str(tmp_path / "d"), "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["count"] == 40 and out["agent"] == "se_darwin"
    pool = json.loads(Path(out["path"]).read_text())
    assert len(pool["trajectories"]) == 40


def test_probe_takes_its_defaults_from_the_settings() -> None:
    """probe's unset --steps/--seed/--device are GENESIS_FP16_PROBE_STEPS, _SEED, the device."""
    from genesis_fp16.cli import build_parser
    from genesis_fp16.commands.probe import apply_defaults
    from genesis_fp16.config.settings import AgentSettings, Settings

    settings = Settings(
        probe_steps=7, seed=3, device="cpu", agents={"se_darwin": AgentSettings(device="cpu")}
    )
    args = build_parser().parse_args(["probe", "se_darwin"])
    assert (args.steps, args.seed, args.device) == (None, None, None)
    apply_defaults(args, settings)
    assert (args.steps, args.seed, args.device) == (7, 3, "cpu")
    explicit = build_parser().parse_args(["probe", "se_darwin", "--steps", "2", "--device", "cpu"])
    apply_defaults(explicit, settings)
    assert (explicit.steps, explicit.device) == (2, "cpu")
