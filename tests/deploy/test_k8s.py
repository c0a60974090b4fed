"""deploy/k8s/: built-in kinds checked by kubernetes-validate --strict, the rest by structure.

kubernetes-validate has schemas only for Kubernetes' own kinds, so the ServiceMonitor
(a Prometheus Operator custom resource) is checked here by a small structural test, and
the Kubeflow TrainJob by the trainer API's own models (tests/deploy/test_trainjob.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from genesis_fp16.paths import AgentPaths

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
MULTINODE = K8S / "multinode-job.yaml"
TRAINJOB = K8S / "trainjob.yaml"
# API groups of custom resources, which kubernetes-validate has no schema for.
CUSTOM_GROUPS = ("monitoring.coreos.com/", "trainer.kubeflow.org/")
SHUTDOWN_BOUND_SECONDS = 30  # the daemon's default GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS


def _documents() -> dict[str, dict[str, Any]]:
    """The single-pod deployment's manifests (all but multinode-job.yaml), keyed by kind."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name in (MULTINODE.name, TRAINJOB.name):  # multi-node: their own tests
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                assert document["kind"] not in found, f"two {document['kind']}s: {path.name}"
                found[document["kind"]] = document
    return found


def _built_in_files(tmp_path: Path) -> list[Path]:
    """Each manifest's built-in documents; a file that mixes in custom ones is copied without."""
    files = []
    for path in sorted(K8S.glob("*.yaml")):
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        built_in = [d for d in documents if not d["apiVersion"].startswith(CUSTOM_GROUPS)]
        if built_in == documents:
            files.append(path)
        elif built_in:
            copy = tmp_path / path.name
            copy.write_text(yaml.safe_dump_all(built_in))
            files.append(copy)
    return files


def _validate(tool: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool, "--strict", *map(str, files)], capture_output=True, text=True, timeout=120
    )


def test_built_in_kinds_pass_strict_validation(kubernetes_validate: str, tmp_path: Path) -> None:
    """kubernetes-validate --strict accepts every built-in manifest, without warnings."""
    files = _built_in_files(tmp_path)
    assert {path.name for path in files} >= {
        "configmap.yaml",
        "multinode-job.yaml",
        "trainjob.yaml",  # its PersistentVolumeClaim
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


TORCHRUN_CLOSE_SECONDS = 30  # torchrun SIGKILLs ranks this long after forwarding SIGTERM


def _multinode(text: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The Service, Job and PersistentVolumeClaim of one multinode-job.yaml text."""
    documents = {doc["kind"]: doc for doc in yaml.safe_load_all(text) if doc}
    return documents["Service"], documents["Job"], documents["PersistentVolumeClaim"]


def _torchrun_flags(args: list[str]) -> dict[str, str]:
    """torchrun's own ``--name=value`` flags, before the ``-m`` of the trained module."""
    own = args[: args.index("-m")]
    return dict(arg.removeprefix("--").split("=", 1) for arg in own)


def _multinode_problems(text: str) -> list[str]:
    """What in a multinode-job.yaml text contradicts its own comments and the docs."""
    service, job, claim = _multinode(text)
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    flags = _torchrun_flags(container["args"])
    problems = []
    if not spec["completions"] == spec["parallelism"] == int(flags["nnodes"]):
        problems.append("completions, parallelism and --nnodes differ")
    if spec["completionMode"] != "Indexed" or spec["backoffLimit"] != 0:
        problems.append("not an Indexed Job that ends on a lost node")
    if int(flags["nproc-per-node"]) != container["resources"]["limits"]["nvidia.com/gpu"]:
        problems.append("--nproc-per-node is not the GPUs per pod")
    if pod["terminationGracePeriodSeconds"] <= TORCHRUN_CLOSE_SECONDS:
        problems.append("the grace period ends before torchrun stops its ranks")
    problems += _rendezvous_problems(service, job["metadata"]["name"], pod, flags)
    return problems + _shared_state_problems(container, pod, claim)


def _rendezvous_problems(
    service: dict[str, Any], job_name: str, pod: dict[str, Any], flags: dict[str, str]
) -> list[str]:
    """Every pod must reach pod 0's c10d store by DNS before any pod is ready."""
    # An Indexed Job's pod N has hostname <job>-N; <subdomain> must be the headless Service.
    host, port = flags["rdzv-endpoint"].rsplit(":", 1)
    subdomain = pod.get("subdomain")
    service_spec = service["spec"]
    (container,) = pod["containers"]
    problems = []
    if flags["rdzv-backend"] != "c10d" or host != f"{job_name}-0.{subdomain}":
        problems.append(f"rendezvous host {host} is not pod 0 of {job_name} under its Service")
    if service["metadata"]["name"] != subdomain:
        problems.append("the pods' subdomain is not the Service")
    if service_spec.get("clusterIP") != "None" or not service_spec.get("publishNotReadyAddresses"):
        problems.append("the Service is not headless with not-ready addresses published")
    if service_spec["selector"] != {"job-name": job_name}:  # set by the Job controller
        problems.append("the Service does not select the Job's pods")
    service_ports = {p["port"] for p in service_spec["ports"]}
    container_ports = {p["containerPort"] for p in container["ports"]}
    if int(port) not in service_ports & container_ports:
        problems.append("the rendezvous port differs between endpoint, Service and container")
    return problems


def _shared_state_problems(
    container: dict[str, Any], pod: dict[str, Any], claim: dict[str, Any]
) -> list[str]:
    """docs/distributed.md: every rank reads the same checkpoint folder, so it is shared."""
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    env = {item["name"]: item.get("value") for item in container["env"]}
    state = env["GENESIS_FP16_STATE_DIR"]
    volume = volumes.get(mounts.get(state, ""), {})
    flags = dict(a.split("=", 1) for a in container["args"] if a.startswith("--checkpoint-dir="))
    agent = container["args"][container["args"].index("train") + 1]
    problems = []
    if volume.get("persistentVolumeClaim", {}).get("claimName") != claim["metadata"]["name"]:
        problems.append("the state folder is not on the shared claim")
    if "ReadWriteMany" not in claim["spec"]["accessModes"]:
        problems.append("the claim is not ReadWriteMany")
    if (
        Path(flags.get("--checkpoint-dir", ""))
        != AgentPaths.for_agent(Path(state), agent).checkpoint_dir
    ):
        problems.append(
            "--checkpoint-dir is not the daemon's checkpoint folder on the shared state"
        )
    return problems


def test_multinode_job_matches_its_comments() -> None:
    """Nodes, rendezvous host and port, GPUs per pod, shared checkpoints and grace all agree."""
    assert _multinode_problems(MULTINODE.read_text()) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("--nnodes=2", "--nnodes=3", "completions, parallelism"),
        ("endpoint=genesis-fp16-train-0.", "endpoint=genesis-fp16-train-1.", "rendezvous host"),
        ("subdomain: genesis-fp16-train", "subdomain: train", "rendezvous host"),
        ('["ReadWriteMany"]', '["ReadWriteOnce"]', "not ReadWriteMany"),
        ("mountPath: /var/lib/genesis-fp16\n", "mountPath: /mnt\n", "not on the shared claim"),
        ("--nproc-per-node=1", "--nproc-per-node=8", "GPUs per pod"),
        ("publishNotReadyAddresses: true", "publishNotReadyAddresses: false", "headless"),
        ("agents/se_darwin/checkpoints", "checkpoints", "--checkpoint-dir"),
        ("genesis-fp16-train:29400", "genesis-fp16-train:29500", "rendezvous port"),
        ("terminationGracePeriodSeconds: 90", "terminationGracePeriodSeconds: 20", "grace"),
        ("job-name: genesis-fp16-train", "job-name: genesis-fp16", "does not select"),
    ],
)
def test_multinode_check_finds_a_broken_copy(old: str, new: str, problem: str) -> None:
    """Each broken copy of the Job manifest is caught, so the check above can fail."""
    text = MULTINODE.read_text()
    assert old in text
    problems = _multinode_problems(text.replace(old, new, 1))
    assert any(problem in p for p in problems), problems
