"""deploy/k8s/: built-in kinds checked by kubernetes-validate --strict, the rest by structure.

kubernetes-validate has schemas only for Kubernetes' own kinds, so the ServiceMonitor
(a Prometheus Operator custom resource) is checked here by a small structural test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SHUTDOWN_BOUND_SECONDS = 30  # the daemon's default GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS


def _documents() -> dict[str, dict[str, Any]]:
    """Every manifest under deploy/k8s/, keyed by kind."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                found[document["kind"]] = document
    return found


def _built_in_files() -> list[Path]:
    files = []
    for path in sorted(K8S.glob("*.yaml")):
        api_versions = {doc["apiVersion"] for doc in yaml.safe_load_all(path.read_text()) if doc}
        if not any(".coreos.com/" in version for version in api_versions):
            files.append(path)
    return files


def _validate(tool: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool, "--strict", *map(str, files)], capture_output=True, text=True, timeout=120
    )


def test_built_in_kinds_pass_strict_validation(kubernetes_validate: str) -> None:
    """kubernetes-validate --strict accepts every built-in manifest, without warnings."""
    files = _built_in_files()
    assert {path.name for path in files} >= {
        "configmap.yaml",
        "multinode-job.yaml",
        "secret.example.yaml",
        "service.yaml",
        "statefulset.yaml",
    }
    result = _validate(kubernetes_validate, files)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARN" not in output and "ERROR" not in output, output


def test_strict_validation_rejects_a_broken_copy(kubernetes_validate: str, tmp_path: Path) -> None:
    """The same check fails on a StatefulSet with a misspelt field, so it can fail."""
    broken = tmp_path / "statefulset.yaml"
    broken.write_text((K8S / "statefulset.yaml").read_text().replace("replicas: 1", "replica: 1"))
    result = _validate(kubernetes_validate, [broken])
    assert result.returncode != 0
    assert "replica" in result.stdout + result.stderr


def test_statefulset_runs_one_gpu_pod_with_state_volume_and_probes() -> None:
    """One replica, a PVC template, GPU limit, /healthz and /readyz, grace > shutdown bound."""
    sts = _documents()["StatefulSet"]
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 1
    assert spec["volumeClaimTemplates"][0]["metadata"]["name"] == "state"
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["GENESIS_FP16_STATE_DIR"] == mounts["state"]
    assert pod["terminationGracePeriodSeconds"] > SHUTDOWN_BOUND_SECONDS
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "metrics" in {port["name"] for port in container["ports"]}


def test_configmap_is_mounted_as_a_folder_and_named_by_the_env_file_variable() -> None:
    """The ConfigMap is a whole-folder mount (updates arrive) holding GENESIS_FP16_ENV_FILE."""
    documents = _documents()
    config = documents["ConfigMap"]
    pod = documents["StatefulSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volume = next(v for v in pod["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert "subPath" not in mount, "a subPath mount never sees ConfigMap updates"
    env = {item["name"]: item.get("value") for item in container["env"]}
    env_file = Path(env["GENESIS_FP16_ENV_FILE"])
    assert env_file.parent == Path(mount["mountPath"])
    assert env_file.name in config["data"]
    # Reloadable settings must not also be pod env vars: env wins over the file.
    file_keys = {
        line.split("=", 1)[0]
        for line in config["data"][env_file.name].splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    }
    assert "ENABLE_FP16_TRAINING" in file_keys
    assert not file_keys & set(env)


def test_service_monitor_scrapes_the_named_metrics_port_of_the_service() -> None:
    """Structural check of the ServiceMonitor: its selector and port match the Service."""
    documents = _documents()
    monitor, service = documents["ServiceMonitor"], documents["Service"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    port_names = {port["name"] for port in service["spec"]["ports"]}
    endpoints = monitor["spec"]["endpoints"]
    assert endpoints and all(endpoint["port"] in port_names for endpoint in endpoints)
    assert all(endpoint.get("path", "/metrics") == "/metrics" for endpoint in endpoints)
    # Prometheus names the job after the Service; rules.yml matches job="genesis-fp16".
    assert service["metadata"]["name"] == "genesis-fp16"
    sts = documents["StatefulSet"]
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert (
        service["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    )
