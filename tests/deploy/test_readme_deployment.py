"""docs/deployment.md (the README's "Deployment" section until issue 60): each of its three
ways names files and objects that exist.

The systemd lines are the unit's own install lines (tests/test_packaging.py runs them);
the kubectl lines apply real manifests (validated in test_k8s.py and test_trainjob.py)
and name the objects those manifests create.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "docs" / "deployment.md").read_text()
UNIT = ROOT / "deploy" / "systemd" / "genesis-fp16.service"


def _subsection(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def _blocks(title: str) -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", _subsection(title), flags=re.S)
    return [[line.strip() for line in block.strip().splitlines()] for block in blocks]


def _commands(title: str) -> list[str]:
    (block, *_) = _blocks(title)
    return block


def _applied_files(commands: list[str]) -> list[str]:
    """Every file a `kubectl apply -f` line names, in order."""
    return [name for command in commands for name in re.findall(r"-f (deploy/\S+)", command)]


def _applied(commands: list[str]) -> dict[str, dict[str, Any]]:
    """The documents of every file a `kubectl apply -f` line names, by kind."""
    found: dict[str, dict[str, Any]] = {}
    for name in _applied_files(commands):
        for doc in yaml.safe_load_all((ROOT / name).read_text()):
            if doc:
                found[doc["kind"]] = doc
    return found


def _one_pod_files(statefulset: str) -> set[str]:
    """What the one-pod deployment with ``statefulset`` needs: every manifest but the other
    StatefulSet, the multi-node runs and the example Secret (filled in by hand, optional)."""
    others = {"statefulset.yaml", "statefulset-cpu.yaml"} - {statefulset}
    others |= {"multinode-job.yaml", "trainjob.yaml", "secret.example.yaml"}
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "deploy" / "k8s").glob("*.yaml")
        if path.name not in others
    }


def _built_tag(commands: list[str], image: str) -> str | None:
    """The torch build (cpu, cuXYZ) of the README's `docker build` line for ``image``."""
    for command in commands:
        found = re.fullmatch(
            rf"docker build (?:--build-arg TORCH=(\S+) )?-t {re.escape(image)} \.", command
        )
        if found:
            return found.group(1) or "cpu"
    return None


def test_deployment_section_shows_systemd_statefulset_and_kubeflow() -> None:
    """The three ways, each with a shell block."""
    for title in (
        "systemd: one host",
        "Kubernetes: one pod (StatefulSet)",
        "Kubernetes: several nodes (Kubeflow Trainer)",
    ):
        assert _commands(title), title


def test_systemd_commands_are_the_units_install_lines() -> None:
    """Every install line of the unit's header appears, as root, in the README's order."""
    header = [line.removeprefix("#").strip() for line in UNIT.read_text().splitlines()]
    unit_lines = [
        line
        for line in header
        if line.startswith(("python3 -m venv", "/tmp/", "/opt/", "install ", "systemctl "))
    ]
    readme = [
        c.removeprefix("sudo ").replace(" && sudo ", " && ") for c in _commands("systemd: one host")
    ]
    assert unit_lines == [line for line in readme if line in unit_lines]
    assert len(unit_lines) >= 7
    for path in re.findall(r"\b(deploy/\S+|\.env\.example|constraints\.txt)", " ".join(readme)):
        assert (ROOT / path).exists(), path


def test_statefulset_commands_name_the_built_image_and_its_objects() -> None:
    """The GPU image is built with TORCH=cu*, kubectl applies every one-pod manifest, then waits."""
    commands = _commands("Kubernetes: one pod (StatefulSet)")
    assert set(_applied_files(commands)) == _one_pod_files("statefulset.yaml")
    sts = _applied(commands)["StatefulSet"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert (_built_tag(commands, container["image"]) or "").startswith("cu")
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert f"kubectl rollout status statefulset/{sts['metadata']['name']}" in commands
    assert any(f"pod/{sts['metadata']['name']}-0 " in c for c in commands)


def test_the_cpu_lines_replace_only_the_image_and_the_statefulset() -> None:
    """Without a GPU: the CPU build, and statefulset-cpu.yaml in place of statefulset.yaml."""
    gpu, cpu = _blocks("Kubernetes: one pod (StatefulSet)")
    files = [f for f in _applied_files(gpu) if f != "deploy/k8s/statefulset.yaml"]
    assert set(files + _applied_files(cpu)) == _one_pod_files("statefulset-cpu.yaml")
    sts = _applied(cpu)["StatefulSet"]
    assert sts["metadata"]["name"] == _applied(gpu)["StatefulSet"]["metadata"]["name"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert _built_tag(cpu, container["image"]) == "cpu"


def test_completeness_check_sees_a_left_out_manifest() -> None:
    """The apply lines of the README before issue 31 miss manifests, so the check can fail."""
    old = [
        "kubectl apply -f deploy/k8s/configmap.yaml -f deploy/k8s/service.yaml"
        " -f deploy/k8s/statefulset.yaml"
    ]
    missing = _one_pod_files("statefulset.yaml") - set(_applied_files(old))
    assert (
        "deploy/k8s/servicemonitor.yaml" in missing and "deploy/k8s/networkpolicy.yaml" in missing
    )


def test_kubeflow_commands_name_the_trainjob_and_its_pods() -> None:
    """kubectl applies the TrainJob and its ConfigMap, then reads that TrainJob and its pods."""
    commands = _commands("Kubernetes: several nodes (Kubeflow Trainer)")
    documents = _applied(commands)
    name = documents["TrainJob"]["metadata"]["name"]
    assert "ConfigMap" in documents
    assert any(c.startswith(f"kubectl get trainjob {name} ") for c in commands)
    assert any(f"jobset.sigs.k8s.io/jobset-name={name}" in c for c in commands)
