"""README's "Deployment" section: each of its three ways names files and objects that exist.

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
README = (ROOT / "README.md").read_text()
UNIT = ROOT / "deploy" / "systemd" / "genesis-fp16.service"


def _subsection(title: str) -> str:
    start = README.index(f"### {title}\n")
    end = min(i for i in (README.find("\n## ", start), README.find("\n### ", start + 1)) if i > 0)
    return README[start:end]


def _commands(title: str) -> list[str]:
    (block,) = re.findall(r"```sh\n(.*?)```", _subsection(title), flags=re.S)
    return [line.strip() for line in block.strip().splitlines()]


def _applied(commands: list[str]) -> dict[str, dict[str, Any]]:
    """The documents of every file a `kubectl apply -f` line names, by kind."""
    found: dict[str, dict[str, Any]] = {}
    for command in commands:
        for name in re.findall(r"-f (deploy/\S+)", command):
            for doc in yaml.safe_load_all((ROOT / name).read_text()):
                if doc:
                    found[doc["kind"]] = doc
    return found


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
    """docker build tags the manifests' image; kubectl applies the StatefulSet it then waits on."""
    commands = _commands("Kubernetes: one pod (StatefulSet)")
    documents = _applied(commands)
    sts = documents["StatefulSet"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert f"docker build -t {container['image']} ." in commands
    assert f"kubectl rollout status statefulset/{sts['metadata']['name']}" in commands
    assert any(f"pod/{sts['metadata']['name']}-0 " in c for c in commands)
    assert {"ConfigMap", "Service"} <= documents.keys()


def test_kubeflow_commands_name_the_trainjob_and_its_pods() -> None:
    """kubectl applies the TrainJob and its ConfigMap, then reads that TrainJob and its pods."""
    commands = _commands("Kubernetes: several nodes (Kubeflow Trainer)")
    documents = _applied(commands)
    name = documents["TrainJob"]["metadata"]["name"]
    assert "ConfigMap" in documents
    assert any(c.startswith(f"kubectl get trainjob {name} ") for c in commands)
    assert any(f"jobset.sigs.k8s.io/jobset-name={name}" in c for c in commands)
