"""The README's commands and examples are true: they are run here as a user would."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from doc_blocks import install_plugin
from reader_venv import make_reader_venv

from genesis_fp16.plugin_api import DEFAULT_STEPS, PrecisionRequest
from genesis_fp16_infrastructure.training.precision.decide import decide

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "genesis_fp16"))  # as tests/deploy/test_grafana.py
from daemon_harness import DaemonProcess, child_pids, daemon_env, launch  # noqa: E402

README = (ROOT / "README.md").read_text()
# What the README moved into docs/ in issue 60, read where it now is.
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
PLUGINS = (ROOT / "docs" / "plugins.md").read_text()


def _code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _calibration_key() -> str:
    """Where docs/configuration.md says `train --json` carries a measured auto's table."""
    found = re.search(
        r"`train --json` carries the table\s+(?:as|under)\s+`([\w.]+)`", CONFIGURATION
    )
    assert found, "docs/configuration.md no longer says where train --json carries the table"
    return found.group(1)


def _json_path(value: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        value = value[key]
    return value


def test_readme_opens_with_make_run_and_make_test() -> None:
    """The first code block is the two commands the project promises on a fresh machine."""
    first = _code_blocks(README, "sh")[0]
    assert [line.split("#")[0].strip() for line in first.strip().splitlines()] == [
        "make run",
        "make test",
    ]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, flags=re.M), ".ci/run must call the README's test command"


def test_every_env_setting_in_the_readme_and_the_configuration_table_exists() -> None:
    """Each variable the README and docs/configuration.md's table (the README's until issue
    60) name is a real setting in .env.example."""
    example = (ROOT / ".env.example").read_text()
    setting = r"`((?:GENESIS_FP16|ENABLE_FP16)[A-Z0-9_]*[A-Z0-9])`"
    table = set(re.findall(setting, CONFIGURATION))
    assert table, "docs/configuration.md names no setting"
    for name in table | set(re.findall(setting, README)):
        assert name in example, f"the docs name {name}, which .env.example does not list"


def test_the_readme_reads_in_five_minutes() -> None:
    """At most 250 lines; its first screen says what the product is before any command."""
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    first = "\n".join(lines[: lines.index("## What you will see first")]).lower()
    for words in ("training daemon", "world models", "mixed precision", "served model"):
        assert words in " ".join(first.split()), words
    assert "```" not in first


def test_the_live_legend_is_what_model_list_prints() -> None:
    """The README's example of the LIVE column is the cell `model list` prints for those
    figures, and REGRESSION is its mark for a regression."""
    from genesis_fp16.commands.model import _live

    example = re.search(r"for example `(\d+) rec, (\w+) ([-+][\d.]+) \[([-+][\d.]+), "
                        r"([-+][\d.]+)\] vs previous`", README)  # fmt: skip
    assert example, "the README's LIVE legend has no example cell"
    records, metric, difference, lower, upper = example.groups()
    figures = {"records": int(records), "metric": metric, "difference": float(difference)}
    figures |= {"lower": float(lower), "upper": float(upper)}
    assert f"for example `{_live(figures)}`" in README
    assert _live({**figures, "regression": True}).endswith(" REGRESSION")
    assert "`REGRESSION` at the end" in README


@pytest.mark.slow
def test_plugin_example_is_discovered_and_trains(tmp_path: Path) -> None:
    """docs/plugins.md's third-party agent (the README's until issue 60), registered by
    entry point, is listed and trains."""
    (toml,) = _code_blocks(PLUGINS, "toml")
    (source,) = _code_blocks(PLUGINS, "python")
    install_plugin(tmp_path / "site", toml, source)
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "site"),
        "GENESIS_FP16_STATE_DIR": str(tmp_path / "state"),
        "GENESIS_FP16_ENV_FILE": str(tmp_path / "none.env"),
    }
    (tmp_path / "none.env").write_text("")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "genesis_fp16", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )

    agents = cli("agents", "--json")
    assert agents.returncode == 0, agents.stderr
    listed = {a["name"]: a for a in json.loads(agents.stdout)}
    assert listed["my_agent"]["state"] == "loaded"
    # Device and precision auto, as a user runs it: cuda on a GPU host, the CPU elsewhere.
    # No --steps, no --data: the reader's command; the default budget and sample data.
    trained = cli("train", "my_agent", "--json")
    assert trained.returncode == 0, trained.stderr
    result = json.loads(trained.stdout.strip().splitlines()[-1])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert result["agent"] == "my_agent"
    assert result["device"].split(":")[0] == device
    # Measured where a 16-bit precision is native (a GPU, an AVX512-BF16 CPU); the rule else.
    # The table is where the README says `train --json` carries it (a KeyError if not).
    calibration = _json_path(result, _calibration_key())
    expected = (
        calibration["chosen"] if calibration else decide(PrecisionRequest("auto"), device).used
    )
    assert result["precision_used"] == expected
    assert result["steps"] == DEFAULT_STEPS
    assert math.isfinite(result["eval"]["loss"])
    assert Path(result["checkpoint"]).exists()


def test_documented_outcome_labels_are_the_ones_emitted() -> None:
    """Every `..._total{outcome="X"}` in README and docs/ is a value the metrics emit."""
    from genesis_fp16.metrics.metric_names import RELOAD_OUTCOMES, RUN_OUTCOMES

    emitted = {"config_reloads_total": RELOAD_OUTCOMES, "training_runs_total": RUN_OUTCOMES}
    texts = [README, *(path.read_text() for path in (ROOT / "docs").glob("*.md"))]
    found = 0
    for text in texts:
        for metric, value in re.findall(r'(\w+_total)\{outcome="(\w+)"\}', text):
            for name, outcomes in emitted.items():
                if metric.endswith(name):
                    found += 1
                    assert value in outcomes, f'{metric}{{outcome="{value}"}}: not in {outcomes}'
    assert found >= 2


def _shell(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One line of a README block, as written, in bash; it must exit 0."""
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", line],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _fresh_clone(tmp_path: Path) -> Path:
    """A clone of this checkout's HEAD whose `.venv` is set up as `make setup` leaves one:
    its own editable genesis-fp16 (the clone's code), the suite's other packages seen
    through a view without any plugin a reader installed (nothing is downloaded)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    python = make_reader_venv(clone / ".venv", keep=())
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*install, "-e", str(clone)], check=True, timeout=600)
    # make's stamps, newer than pyproject.toml and constraints.txt: `make run` and
    # `make lint` take this venv as set up rather than download torch again.
    for stamp in (".installed", ".installed-run"):
        (clone / ".venv" / stamp).touch()
    return clone


def _readme_blocks() -> list[list[str]]:
    """The README's shell blocks, top to bottom, each as its commands (comments dropped)."""
    blocks = _code_blocks(README, "sh")
    return [[line.split(" #")[0].strip() for line in b.strip().splitlines()] for b in blocks]


def _stop_like_ctrl_c(daemon: DaemonProcess) -> int:
    """Ctrl-C in `make run`'s terminal: SIGINT to the daemon, then make ends with it."""
    for pid in child_pids(daemon.process.pid):
        os.kill(pid, signal.SIGINT)
    return daemon.wait_exit(timeout=120)


@pytest.mark.slow
def test_the_readme_top_to_bottom_in_a_fresh_clone(tmp_path: Path) -> None:
    """A fresh clone, its README followed as written: `make run`'s daemon answers status
    and shows its page, the by-hand `train` runs, the plugin block makes, installs and
    checks my_agent and the running daemon loads it; then, with my_agent installed and
    its folder in the checkout, `make lint` and the suite's scaffold tests pass there
    (`make test`'s ruff and the tests a reader's plugin broke; the whole suite is this)."""
    clone = _fresh_clone(tmp_path)
    (run_block, train_block, plugin_block) = _readme_blocks()
    assert run_block == ["make run", "make test"]
    daemon = launch(clone, {}, fixtures=False, command=("make", "run"))
    env = daemon_env({"GENESIS_FP16_METRICS_PORT": str(daemon.port)}, fixtures=False)
    env["TMPDIR"] = str(tmp_path)
    try:
        daemon.wait_for(lambda: daemon.get("/readyz")[0] == 200, "make run's daemon", 600)
        status = _shell(".venv/bin/genesis-fp16 status", clone, env).stdout
        assert f"running, pid {child_pids(daemon.process.pid)[0]}" in status, status
        assert "se_darwin" in daemon.get("/")[1] and "rlhf_ppo" in status
        for line in train_block + plugin_block:
            _shell(line, clone, env)
        ready = "ready: agents my_agent, rlhf_ppo, se_darwin"
        daemon.wait_for(lambda: daemon.get("/readyz")[1].strip() == ready, "my_agent", 60)
        # The tour's first served model is test_doc_blocks.py's make_run_state (`make run`'s
        # daemon, as here): waiting for it again would double this test on a loaded CPU.
    finally:
        _stop_like_ctrl_c(daemon)
    assert (clone / "my-agent" / "pyproject.toml").is_file()
    _shell("make lint", clone, env)
    scaffold = ".venv/bin/python -m pytest -q -p no:cacheprovider tests/genesis_fp16/scaffold"
    summary = _shell(scaffold, clone, env).stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed in .*", summary), summary  # the slow ones ran too
