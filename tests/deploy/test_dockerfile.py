"""Dockerfile: linted by hadolint itself, and checked against the conventions it promises.

No container engine or registry is reachable from the test machines, so the image is not
built here (docs/operations.md, "Container image", says what was built and how); the lint
and the structure below run everywhere.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
K8S = ROOT / "deploy" / "k8s"
RUN_AS = 10001  # the manifests' runAsUser
BUILD_TOOLS = ("build-essential", "gcc", "g++", "make", "git", "curl", "wget", "python3-dev")


def _lint(tool: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool, "--failure-threshold", "style", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _stages(text: str) -> list[list[str]]:
    """The instructions of each stage (continuation lines joined), in order."""
    joined = re.sub(r"\\\n\s*", " ", text)
    stages: list[list[str]] = [[]]
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM ") and stages[-1]:
            stages.append([])
        stages[-1].append(line)
    return [stage for stage in stages if stage[0].upper().startswith("FROM ")]


def _instructions(stage: list[str], keyword: str) -> list[str]:
    return [line.split(None, 1)[1] for line in stage if line.split(None, 1)[0].upper() == keyword]


def test_hadolint_passes_without_any_finding(hadolint: str) -> None:
    """hadolint reports nothing, down to style findings."""
    result = _lint(hadolint, DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "", result.stdout


def test_hadolint_catches_a_broken_copy(hadolint: str, tmp_path: Path) -> None:
    """The same lint fails on a copy whose last USER is root, so it can fail."""
    broken = tmp_path / "Dockerfile"
    text = DOCKERFILE.read_text()
    assert f"USER {RUN_AS}:{RUN_AS}" in text
    broken.write_text(text.replace(f"USER {RUN_AS}:{RUN_AS}", "USER root"))
    result = _lint(hadolint, broken)
    assert result.returncode != 0
    assert "DL3002" in result.stdout, result.stdout


def test_final_stage_is_slim_unprivileged_and_serves_with_a_healthcheck() -> None:
    """Multi-stage; the last stage: slim base, no build tools, uid 10001, serve, HEALTHCHECK."""
    text = DOCKERFILE.read_text()
    stages = _stages(text)
    assert len(stages) >= 2, "the build tools need a stage of their own"
    final = stages[-1]
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", text)
    assert base and "-slim" in base.group(1)
    assert all("-slim" in b or b == "${PYTHON_IMAGE}" for b in _instructions(final, "FROM"))
    runs = " ".join(_instructions(final, "RUN"))
    assert not [tool for tool in BUILD_TOOLS if re.search(rf"\b{re.escape(tool)}\b", runs)]
    assert "-m build" not in runs and "COPY --from=build /opt/genesis-fp16" in "\n".join(final)
    assert _instructions(final, "USER") == [f"{RUN_AS}:{RUN_AS}"]
    assert _instructions(final, "ENTRYPOINT") == ['["genesis-fp16"]']
    assert _instructions(final, "CMD") == ['["serve"]']
    (health,) = _instructions(final, "HEALTHCHECK")
    assert "/healthz" in health


def test_torch_build_is_chosen_by_an_argument() -> None:
    """ARG TORCH picks the wheel index (cpu or a CUDA build); the version is constraints.txt's."""
    text = DOCKERFILE.read_text()
    assert "ARG TORCH=cpu" in text
    assert "download.pytorch.org/whl/${TORCH}" in text
    pinned = re.search(r"^torch==(\S+)", (ROOT / "constraints.txt").read_text(), re.M)
    assert pinned and f"ARG TORCH_VERSION={pinned.group(1)}" in text


def test_manifests_run_the_image_this_file_builds() -> None:
    """A manifest that asks for a GPU runs the documented CUDA build's tag; others the CPU one."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    text = DOCKERFILE.read_text()
    tag = re.search(r"docker build -t (\S+) \.", text)
    cuda = re.search(r"docker build --build-arg TORCH=(cu\d+) -t (\S+) \.", text)
    assert tag and tag.group(1).endswith(f":{version}")
    assert cuda and cuda.group(2) == f"{tag.group(1)}-{cuda.group(1)}"
    assert f'org.opencontainers.image.version="{version}"' in text
    wanted = {False: tag.group(1), True: cuda.group(2)}
    seen = set()
    for path in K8S.glob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            dumped = yaml.safe_dump(document or {})
            gpu = "nvidia.com/gpu" in dumped
            for image in re.findall(r"^\s*image: (\S+)", dumped, re.M):
                assert image == wanted[gpu], f"{path.name}: {image}, gpu={gpu}"
                seen.add(gpu)
    assert seen == {False, True}


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    """The build context is the packages and build metadata: no venv, state, .git or tests."""
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert next(line for line in ignore if not line.startswith("#")) == "*"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = set()
    for stage in _stages(DOCKERFILE.read_text()):
        for args in _instructions(stage, "COPY"):
            if not args.startswith("--from"):
                copied |= {Path(p).as_posix().rstrip("/") for p in args.split()[:-1]}
    assert copied and copied <= allowed, copied - allowed
