"""The wheel and sdist that `python -m build` makes, installed as the systemd unit says.

The unit file's header is the install procedure (docs/operations.md repeats it): the test
runs those very lines, with /opt and the build venv moved into a temporary folder, then
the installed console script, from outside the repository so nothing is imported from
the checkout.

Building and installing fetch from a package index (the build backend, then torch and the
daemon's dependencies): without one the tests skip and say why, or fail when CI is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import NoReturn

import pytest

from genesis_fp16.plugin_api import API_VERSION

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "deploy" / "systemd" / "genesis-fp16.service"
OPERATIONS = ROOT / "docs" / "operations.md"
OPT = "/opt/genesis-fp16"
BUILD_VENV = "/tmp/genesis-fp16-build"
# Extras that running the daemon must not pull in (dev and bench).
NOT_FOR_RUNNING = ("pytest", "mypy", "ruff", "accelerate", "lightning-fabric", "build")
_COPY_IGNORE = shutil.ignore_patterns(
    ".venv", ".git", "build", "dist", "state", "*.egg-info", "__pycache__", ".*_cache"
)


CONSTRAINTS = ROOT / "constraints.txt"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# What a venv has before anything is installed in it; the unit's install brings the rest.
VENV_OWN = ("pip",)
# What `import torch` prints without numpy (torch's CPU wheels do not depend on it).
NUMPY_WARNING = "Failed to initialize NumPy"

# The first thing a build fetches: the build backend named by pyproject.toml.
INDEX_PROBE = "setuptools>=68"


def probe_package_index(env: dict[str, str] | None = None) -> str | None:
    """None when pip fetches the build backend from its configured index, else why not.

    pip's own configuration (index, extra indexes, find-links) decides what "the index"
    is; a 5 s timeout and no retries make a host without a network answer in seconds.
    """
    with tempfile.TemporaryDirectory() as dest:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", dest]
        command += ["--timeout", "5", "--retries", "0", "--quiet", INDEX_PROBE]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
        except subprocess.TimeoutExpired:
            return f"no package index reachable: pip download {INDEX_PROBE} took over 60 s"
    if result.returncode == 0:
        return None
    last = (result.stderr.strip().splitlines() or ["no output"])[-1]
    return f"no package index reachable: pip download {INDEX_PROBE} failed: {last}"


def skip_or_fail(reason: str) -> NoReturn:
    """Skip with ``reason``; fail when CI is set (as tests/conftest.py's require_tool)."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so this is a failure, not a skip")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def package_index() -> None:
    """The builds and installs below need a package index: skip without one, fail in CI."""
    reason = probe_package_index()
    if reason is not None:
        skip_or_fail(reason)


def test_probe_says_why_when_no_index_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """An index on a closed port: the probe gives pip's reason; it skips, or fails under CI."""
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/simple"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=closed)
        reason = probe_package_index(env)
    assert reason is not None
    assert reason.startswith(f"no package index reachable: pip download {INDEX_PROBE} failed")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no package index reachable"):
        skip_or_fail(reason)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set, so this is a failure"):
        skip_or_fail(reason)


def unit_install_lines(text: str) -> list[str]:
    """The shell lines of the unit header that build the wheel and install it."""
    lines = [line.removeprefix("#").strip() for line in text.splitlines()]
    return [line for line in lines if line.startswith(("python3 -m venv", "/tmp/", "/opt/"))]


def test_unit_install_lines_are_the_runbooks() -> None:
    """docs/operations.md shows the unit's own build-and-install lines (with sudo)."""
    lines = unit_install_lines(UNIT.read_text())
    assert len(lines) == 5, lines
    assert any("-m build" in line for line in lines)
    # torch alone from the CPU index (no CUDA packages), then the wheel: both constrained.
    torch_line, wheel_line = lines[-2:]
    assert f"--no-deps --index-url {TORCH_CPU_INDEX} -c constraints.txt torch" in torch_line
    assert "-c constraints.txt dist/genesis_fp16-" in wheel_line
    runbook = OPERATIONS.read_text()
    for line in lines:
        assert f"sudo {line.replace(' && ', ' && sudo ')}" in runbook, line


@pytest.fixture(scope="module")
def installed(package_index: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv made by running the unit's install lines on a copy of the repository."""
    base = tmp_path_factory.mktemp("packaging")
    checkout = base / "checkout"
    shutil.copytree(ROOT, checkout, ignore=_COPY_IGNORE)
    venv, build_venv = base / "opt", base / "build-venv"
    for line in unit_install_lines(UNIT.read_text()):
        command = line.replace(OPT, str(venv)).replace(BUILD_VENV, str(build_venv))
        result = subprocess.run(
            ["bash", "-ec", command],
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
        assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return venv


@pytest.mark.slow
def test_build_makes_a_wheel_and_an_sdist(package_index: None, tmp_path: Path) -> None:
    """python -m build makes both; the wheel holds the three packages and the entry points."""
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(tmp_path), "."],
        cwd=shutil.copytree(ROOT, tmp_path / "src", ignore=_COPY_IGNORE),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = tmp_path.glob("genesis_fp16-*-py3-none-any.whl")
    (sdist,) = tmp_path.glob("genesis_fp16-*.tar.gz")
    assert sdist.stat().st_size > 0
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
    tops = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert tops == {"genesis_fp16", "genesis_fp16_agents", "genesis_fp16_infrastructure"}
    assert not any(name.startswith("tests/") for name in names)
    assert "genesis-fp16 = genesis_fp16.cli:main" in text
    assert "se_darwin = genesis_fp16_agents.se_darwin:plugin" in text


@pytest.mark.slow
def test_installed_wheel_runs_help_and_a_short_training(installed: Path, tmp_path: Path) -> None:
    """From the installed wheel alone: --help works, and se_darwin trains 3 steps on the CPU."""
    exe = installed / "bin" / "genesis-fp16"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "GENESIS_FP16_STATE_DIR": str(tmp_path / "state"),
    }
    where = subprocess.run(
        [installed / "bin" / "python", "-c", "import genesis_fp16; print(genesis_fp16.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(installed), where.stdout
    help_text = subprocess.run(
        [exe, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "serve" in help_text and "train" in help_text
    result = subprocess.run(
        [exe, "train", "se_darwin", "--steps", "3", "--device", "cpu", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["agent"] == "se_darwin" and out["steps"] == 3
    assert Path(out["checkpoint"]).is_relative_to(tmp_path / "state")


@pytest.mark.slow
def test_installed_wheel_brings_only_what_running_needs(installed: Path) -> None:
    """The unit's install has torch and the daemon's dependencies, none of the dev/bench tools."""
    listing = subprocess.run(
        [installed / "bin" / "python", "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    )
    names = {item["name"].lower().replace("_", "-") for item in json.loads(listing.stdout)}
    assert {"genesis-fp16", "torch", "pydantic", "prometheus-client"} <= names
    assert not names & set(NOT_FOR_RUNNING), names & set(NOT_FOR_RUNNING)


def installed_agents(
    installed: Path, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`genesis-fp16 agents --json` of the installed venv, run in ``cwd``; it must succeed."""
    exe = installed / "bin" / "genesis-fp16"
    listing = subprocess.run(
        [exe, "agents", "--json"], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert listing.returncode == 0, listing.stderr[-3000:]
    return listing


def _wheel_owning_agents(out: Path) -> Path:
    """A wheel of another distribution with the top-level packages agents and infrastructure.

    Written by hand (a wheel is a zip with a dist-info folder), so no index is needed:
    it stands for the agent SDKs and the other `infrastructure` distributions on PyPI.
    """
    wheel = out / "other_agents-1.0-py3-none-any.whl"
    files = {
        "agents/__init__.py": 'OWNER = "other-agents"\n',
        "infrastructure/__init__.py": 'OWNER = "other-agents"\n',
        "other_agents-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: other-agents\n"
        "Version: 1.0\n",
        "other_agents-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
        "other_agents-1.0.dist-info/top_level.txt": "agents\ninfrastructure\n",
    }
    record = [f"{name},," for name in files] + ["other_agents-1.0.dist-info/RECORD,,"]
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("other_agents-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


@pytest.mark.slow
def test_installed_wheel_imports_beside_a_distribution_that_owns_agents(
    installed: Path, tmp_path: Path
) -> None:
    """Another distribution's agents/infrastructure, even first on the path, shadow nothing."""
    target = tmp_path / "other"
    python = installed / "bin" / "python"
    pip = [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", target]
    subprocess.run(
        [*pip, _wheel_owning_agents(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    # PYTHONPATH comes before site-packages: the worst place for a colliding name to be.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    env.update(PYTHONPATH=str(target), GENESIS_FP16_STATE_DIR=str(tmp_path / "state"))
    both = subprocess.run(
        [
            python,
            "-c",
            "import agents, infrastructure, genesis_fp16.plugin_api as api;"
            "print(agents.OWNER, infrastructure.OWNER, api.API_VERSION)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert both.returncode == 0, both.stderr[-3000:]
    # The installed package's own contract version, not a name the other distribution owns.
    assert both.stdout.split() == ["other-agents", "other-agents", str(API_VERSION)]
    listing = installed_agents(installed, tmp_path, env)
    states = {row["name"]: row["state"] for row in json.loads(listing.stdout)}
    assert states.get("se_darwin") == "loaded" and states.get("rlhf_ppo") == "loaded", states


def test_every_package_folder_is_its_import_name() -> None:
    """No package-dir mapping: under each source root a package's folder path is its name."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "package-dir" not in setuptools
    roots = setuptools["packages"]["find"]["where"]
    found = {}
    for root in roots:
        for init in sorted((ROOT / root).glob("genesis_fp16*/**/__init__.py")):
            folder = init.parent.relative_to(ROOT / root)
            found[".".join(folder.parts)] = root
    assert set(found) >= {"genesis_fp16", "genesis_fp16_agents", "genesis_fp16_infrastructure"}
    assert found["genesis_fp16_agents.se_darwin"] == "agents"
    assert found["genesis_fp16_infrastructure.training.run"] == "infrastructure"
    # a folder that is no package (no __init__.py) between a root and a module would hide it
    for room, package in (
        ("agents", "genesis_fp16_agents"),
        ("infrastructure", "genesis_fp16_infrastructure"),
    ):
        assert not list((ROOT / room).glob("*.py")), (
            f"{room}/ is a source root: modules go in {package}/"
        )
        modules = (ROOT / room / package).rglob("*.py")
        assert all((path.parent / "__init__.py").is_file() for path in modules), room


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_versions(text: str) -> dict[str, str]:
    """The ``name==version`` lines of a constraints file, by normalized name."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not an exact pin"
            pins[_normalized(name)] = version
    return pins


def test_every_dependency_is_bounded_and_pinned_within_its_bounds() -> None:
    """pyproject's dependencies each have an upper bound, and constraints.txt a pin inside it."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = pinned_versions(CONSTRAINTS.read_text())
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in map(Requirement, dependencies):
        name = _normalized(requirement.name)
        assert any(s.operator in ("<", "<=", "==") for s in requirement.specifier), requirement
        assert name in pins, f"{name} has no pin in constraints.txt"
        assert Version(pins[name]) in requirement.specifier, (requirement, pins[name])
    assert "numpy" in {_normalized(Requirement(d).name) for d in dependencies}


@pytest.mark.slow
def test_installed_wheel_has_exactly_the_pinned_versions(installed: Path) -> None:
    """The documented install gives the pinned version of every package it brings (CPU torch)."""
    python = installed / "bin" / "python"
    listing = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    )
    got = {_normalized(item["name"]): item["version"] for item in json.loads(listing.stdout)}
    pins = pinned_versions(CONSTRAINTS.read_text())
    brought = {n: v for n, v in got.items() if n not in (*VENV_OWN, "genesis-fp16")}
    # torch==2.13.0 admits a build's local label (2.13.0+cpu), as pip's constraint does.
    differ = {
        name: (version, pins.get(name))
        for name, version in brought.items()
        if version.split("+")[0] != pins.get(name)
    }
    assert not differ, f"installed (version, pin), unpinned when the pin is None: {differ}"
    assert "+cu" not in got["torch"] and not any(n.startswith("nvidia-") for n in got), got
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.slow
def test_installed_daemon_imports_torch_without_the_numpy_warning(
    installed: Path, tmp_path: Path
) -> None:
    """A process of the installed venv is silent about NumPy; with numpy hidden it is not."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    env["GENESIS_FP16_STATE_DIR"] = str(tmp_path / "state")
    agents = installed_agents(installed, tmp_path, env)
    assert NUMPY_WARNING not in agents.stderr, agents.stderr[-3000:]
    # The same import with numpy made unimportable: the check sees torch's warning.
    hide_numpy = "sys.modules['numpy'] = None"
    hidden = subprocess.run(
        [installed / "bin" / "python", "-c", f"import sys; {hide_numpy}; import torch"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert hidden.returncode == 0, hidden.stderr[-3000:]
    assert NUMPY_WARNING in hidden.stderr, hidden.stderr[-3000:]
