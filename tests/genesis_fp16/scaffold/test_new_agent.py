"""`genesis-fp16 new-agent`: the package it writes installs into a fresh venv and trains
under `serve` with no flag and no setting, on the request's default budget."""

from __future__ import annotations

import importlib.util
import json
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import start_daemon
from reader_venv import make_reader_venv

from genesis_fp16.plugin_api import DEFAULT_STEPS
from genesis_fp16.scaffold import ScaffoldError, package_files, write_agent
from genesis_fp16.testing import RULES

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def name() -> str:
    """An agent name no installed plugin or module has: a reader's `pip install -e
    ./my-agent` into the suite's venv (the README's steps) must not change these tests."""
    name = f"toy_{secrets.token_hex(4)}"
    assert importlib.util.find_spec(name) is None
    return name


def _cli(*args: str, cwd: Path, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    (cwd / "none.env").write_text("")
    env = {"GENESIS_FP16_ENV_FILE": str(cwd / "none.env"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [python, "-m", "genesis_fp16", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_new_agent_writes_a_complete_package(tmp_path: Path, name: str) -> None:
    """pyproject (build system, version, entry point), the agent, a test and a README."""
    done = _cli("new-agent", name, "--out", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    root = Path(done.stdout.splitlines()[0])
    assert root == tmp_path / name.replace("_", "-")
    pyproject = (root / "pyproject.toml").read_text()
    for needed in (
        "[build-system]",
        'version = "0.1.0"',
        '[project.entry-points."genesis_fp16.agents"]',
        f'{name} = "{name}:plugin"',
    ):
        assert needed in pyproject
    assert "from genesis_fp16.plugin_api import" in (root / name / "__init__.py").read_text()
    assert (root / "tests" / f"test_{name}.py").exists()
    again = _cli("new-agent", name, "--out", str(tmp_path), cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    bad = _cli("new-agent", "My-Agent", cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    with pytest.raises(ScaffoldError):
        write_agent("class", tmp_path)


def test_new_agent_prints_the_next_three_steps_for_this_interpreter(
    tmp_path: Path, name: str
) -> None:
    """After the folder: install it editable with this very Python, check it, and how a
    running daemon picks it up."""
    done = _cli("new-agent", name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    folder, heading, install, check, serve = done.stdout.splitlines()
    dist = name.replace("_", "-")
    assert (folder, heading) == (dist, "next:")
    assert install.endswith(f"{sys.executable} -m pip install -e {dist}")
    assert check.split()[-2:] == ["check-agent", name] and check.startswith("  2. ")
    assert serve.startswith("  3. ") and "SIGHUP" in serve and "GENESIS_FP16_HEARTBEAT" in serve


def test_new_agent_json_is_one_object_and_a_refusal_an_error_object(
    tmp_path: Path, name: str
) -> None:
    """--json: the folder and the same three steps as one object; a taken name, exit 2 and
    the error object."""
    done = _cli("new-agent", name, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert made["agent"] == name and (tmp_path / made["folder"]).is_dir()
    assert [step[:5] for step in made["next"]] == ["  1. ", "  2. ", "  3. "]
    again = _cli("new-agent", name, "--json", cwd=tmp_path)
    error = json.loads(again.stdout.strip().splitlines()[-1])
    assert again.returncode == 2 and error["kind"] == "refused" and error["exit_code"] == 2
    assert "already exists" in error["error"]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("se_darwin", "an installed agent has it (genesis-fp16: genesis_fp16_agents.se_darwin"),
        ("json", "a module of that name is importable already"),
    ],
)
def test_new_agent_refuses_a_name_already_taken(tmp_path: Path, name: str, why: str) -> None:
    """An installed agent's name, or an importable module's: one line, exit 2, no folder."""
    done = _cli("new-agent", name, cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"genesis-fp16: error: agent name {name!r}: {why}"), line
    assert not (tmp_path / name.replace("_", "-")).exists()


@pytest.mark.slow
def test_the_scaffolds_test_runs_with_the_standard_library_alone(tmp_path: Path) -> None:
    """The scaffold's test passes under a plain `python -m unittest` in the package's
    folder, as its README says (it once printed "Ran 0 tests", OK), and so with pytest
    made unimportable, as in the daemon's venv, which has no pytest."""
    root = write_agent("toy_unit", tmp_path)
    hide_pytest = (
        "import sys, unittest; sys.modules['pytest'] = None; "
        "unittest.main(module=None, argv=['unittest'])"
    )
    assert "(cd toy-unit && python -m unittest)" in (root / "README.md").read_text()
    for command in ([sys.executable, "-m", "unittest"], [sys.executable, "-c", hide_pytest]):
        done = subprocess.run(
            command,
            cwd=root,
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert "Ran 1 test" in done.stderr and done.stderr.rstrip().endswith("OK")


def test_the_plugin_docs_show_the_scaffold_output() -> None:
    """docs/plugins.md shows new-agent's pyproject.toml and agent for my_agent, byte for byte."""
    doc = (ROOT / "docs" / "plugins.md").read_text()
    files = package_files("my_agent")
    assert f"```toml\n{files['pyproject.toml']}```" in doc
    assert f"```python\n{files['my_agent/__init__.py']}```" in doc


def _ruff(folder: Path) -> subprocess.CompletedProcess[str]:
    """`ruff check .` and `ruff format --check .` in ``folder``, as `make lint` runs them."""
    command = f"{sys.executable} -m ruff check . && {sys.executable} -m ruff format --check ."
    return subprocess.run(
        ["bash", "-c", command], cwd=folder, capture_output=True, text=True, timeout=120
    )


def test_the_scaffold_passes_ruff_inside_a_checkout_and_on_its_own(
    tmp_path: Path, name: str
) -> None:
    """new-agent's package lints clean on its own and inside a checkout (this repository's
    settings, which order its imports the other way); without its own settings the
    checkout's ruff flags it, so the check can fail."""
    alone = write_agent(name, tmp_path / "alone")
    assert _ruff(alone).returncode == 0, _ruff(alone).stdout
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(ROOT / "pyproject.toml", checkout)
    inside = write_agent(name, checkout)
    done = _ruff(checkout)
    assert done.returncode == 0, done.stdout
    pyproject = inside / "pyproject.toml"
    pyproject.write_text(re.sub(r"\n\[tool\.ruff.*", "\n", pyproject.read_text(), flags=re.S))
    flagged = _ruff(checkout)
    assert flagged.returncode == 1 and "I001" in flagged.stdout, flagged.stdout


def readme_plugin_lines() -> list[str]:
    """The README's plugin block: its commands, comments dropped."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Write an agent plugin") :]
    (block, *_) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return [line.split("#")[0].strip() for line in block.strip().splitlines()]


@pytest.mark.slow
def test_the_scaffold_installs_in_a_fresh_venv_and_trains_under_serve(tmp_path: Path) -> None:
    """The README's lines in a new venv while its daemon runs (pip install -e ./my-agent,
    check-agent): the daemon loads my_agent with no signal, flag or setting, trains it on
    its default budget, and its run shows in /metrics and /readyz. A my_agent a reader
    installed into the suite's venv is not seen there."""
    # The new venv sees this one's packages (genesis-fp16, torch, pip) but its plugins, so
    # nothing big is downloaded; my-agent itself goes into the new venv only.
    python = str(make_reader_venv(tmp_path / "venv"))
    # The README's lines as written; only where the venv is differs.
    lines = readme_plugin_lines()
    assert lines[0] == ".venv/bin/genesis-fp16 new-agent my_agent"
    (tmp_path / "none.env").write_text("")
    env = {"GENESIS_FP16_ENV_FILE": str(tmp_path / "none.env"), "PATH": "/usr/bin:/bin"}
    workdir = tmp_path / "daemon"
    workdir.mkdir()
    # The daemon runs before the agent exists: it must find the editable install by itself
    # (its ticks rescan the plugins). The allowlist keeps the built-in agents from training
    # beside it on a 2-core host; my_agent itself gets no setting.
    daemon = start_daemon(
        workdir,
        {"GENESIS_FP16_PLUGIN_ALLOWLIST": "my_agent"},
        fixtures=False,
        command=(python, "-m", "genesis_fp16", "serve"),
    )
    outputs = []
    try:
        assert daemon.get("/readyz")[1].strip() == "ready: agents none"
        for line in lines:
            line = line.replace(".venv/bin/genesis-fp16", f"{python} -m genesis_fp16")
            line = line.replace(".venv/bin/pip", f"{python} -m pip")
            done = subprocess.run(
                ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                timeout=300,
            )  # fmt: skip
            assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
            outputs.append(done.stdout)
    except BaseException:
        daemon.stop()
        raise
    # Not this venv's: only the new one has it (a reader's own my_agent may be here).
    spec = importlib.util.find_spec("my_agent")
    assert spec is None or tmp_path not in Path(spec.origin or "").parents
    check = outputs[-1].strip().splitlines()
    rules, capabilities = check[: len(RULES)], check[len(RULES) :]
    assert all(line.startswith("PASS ") for line in rules), check
    assert [line.split(":")[0] for line in capabilities] == ["HAS replay_task", "HAS judged"]
    try:
        daemon.wait_for(
            lambda: daemon.sample(
                "genesis_fp16_training_runs_total", agent="my_agent", outcome="success"
            ),
            "my_agent's first run",
            timeout=240,
        )
        runs = [
            json.loads(line)
            for line in daemon.log_path.read_text().splitlines()
            if line.startswith("{")
        ]
        finished = [r for r in runs if r.get("agent") == "my_agent" and "steps" in r]
        assert any(r["steps"] == DEFAULT_STEPS for r in finished), finished[-3:]
        assert daemon.get("/readyz")[1].strip() == "ready: agents my_agent"
    finally:
        daemon.stop()
