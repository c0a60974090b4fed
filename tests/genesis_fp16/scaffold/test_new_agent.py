"""`genesis-fp16 new-agent`: the package it writes installs into a fresh venv and trains
under `serve` with no flag and no setting, on the request's default budget."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from daemon_harness import start_daemon

from genesis_fp16.plugin_api import DEFAULT_STEPS
from genesis_fp16.scaffold import ScaffoldError, package_files, write_agent
from genesis_fp16.testing import RULES

ROOT = Path(__file__).resolve().parents[3]


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


def test_new_agent_writes_a_complete_package(tmp_path: Path) -> None:
    """pyproject (build system, version, entry point), the agent, a test and a README."""
    done = _cli("new-agent", "my_agent", "--out", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    root = Path(done.stdout.splitlines()[0])
    assert root == tmp_path / "my-agent"
    pyproject = (root / "pyproject.toml").read_text()
    for needed in (
        "[build-system]",
        'version = "0.1.0"',
        '[project.entry-points."genesis_fp16.agents"]',
        'my_agent = "my_agent:plugin"',
    ):
        assert needed in pyproject
    assert "from genesis_fp16.plugin_api import" in (root / "my_agent" / "__init__.py").read_text()
    assert (root / "tests" / "test_my_agent.py").exists()
    again = _cli("new-agent", "my_agent", "--out", str(tmp_path), cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    bad = _cli("new-agent", "My-Agent", cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    with pytest.raises(ScaffoldError):
        write_agent("class", tmp_path)


def test_new_agent_prints_the_next_three_steps_for_this_interpreter(tmp_path: Path) -> None:
    """After the folder: install it editable with this very Python, check it, and how a
    running daemon picks it up."""
    done = _cli("new-agent", "my_agent", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    folder, heading, install, check, serve = done.stdout.splitlines()
    assert (folder, heading) == ("my-agent", "next:")
    assert install.endswith(f"{sys.executable} -m pip install -e my-agent")
    assert check.split()[-2:] == ["check-agent", "my_agent"] and check.startswith("  2. ")
    assert serve.startswith("  3. ") and "SIGHUP" in serve and "GENESIS_FP16_HEARTBEAT" in serve


def test_new_agent_json_is_one_object_and_a_refusal_an_error_object(tmp_path: Path) -> None:
    """--json: the folder and the same three steps as one object; a taken name, exit 2 and
    the error object."""
    done = _cli("new-agent", "my_agent", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert made["agent"] == "my_agent" and (tmp_path / made["folder"]).is_dir()
    assert [step[:5] for step in made["next"]] == ["  1. ", "  2. ", "  3. "]
    again = _cli("new-agent", "my_agent", "--json", cwd=tmp_path)
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
    """The scaffold's test passes under `python -m unittest` with pytest made unimportable,
    as in the daemon's venv, which has no pytest."""
    root = write_agent("toy_unit", tmp_path)
    hide_pytest = (
        "import sys, unittest; sys.modules['pytest'] = None; "
        "unittest.main(module=None, argv=['unittest', 'discover', '-s', 'tests'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide_pytest],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Ran 1 test" in done.stderr and done.stderr.rstrip().endswith("OK")


def test_the_readme_plugin_section_is_the_scaffold_output() -> None:
    """The README shows new-agent's pyproject.toml and agent for my_agent, byte for byte."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Writing an agent plugin") :]
    section = section[: section.index("\n## ", 5)]
    files = package_files("my_agent")
    assert f"```toml\n{files['pyproject.toml']}```" in section
    assert f"```python\n{files['my_agent/__init__.py']}```" in section


@pytest.mark.slow
def test_the_scaffold_installs_in_a_fresh_venv_and_trains_under_serve(tmp_path: Path) -> None:
    """The README's lines in a new venv while its daemon runs (pip install -e ./my-agent,
    check-agent): the daemon loads my_agent with no signal, flag or setting, trains it on
    its default budget, and its run shows in /metrics and /readyz."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    # The new venv sees this one's packages (genesis-fp16, torch, pip), so nothing big is
    # downloaded; my-agent itself goes into the new venv only.
    site = subprocess.check_output(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    ).strip()
    ours = sysconfig.get_paths()["purelib"]
    Path(site, "outer.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    # The README's lines as written; only where the venv is differs.
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Writing an agent plugin") :]
    block = section[
        section.index("```sh\n") + 6 : section.index("```", section.index("```sh\n") + 6)
    ]
    lines = [line.split("#")[0].strip() for line in block.strip().splitlines()]
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
        {"GENESIS_FP16_PLUGIN_ALLOWLIST": "my_agent", "GENESIS_FP16_RUN_ISOLATION": "process"},
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
    # Not importable from this venv: only the new one has it.
    assert subprocess.run([sys.executable, "-c", "import my_agent"]).returncode != 0
    check = outputs[-1].strip().splitlines()
    assert len(check) == len(RULES) and all(line.startswith("PASS ") for line in check), check
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
