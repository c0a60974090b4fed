"""deploy/k8s/trainjob.yaml: the TrainJob, checked by Kubeflow Trainer's own API models.

kubeflow-trainer-api (the trainer's generated pydantic models, v2.2) reads the manifest;
types are checked by pydantic, and a key the schema does not know is dropped on the way
in, so writing the model back must give the manifest unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from genesis_fp16_infrastructure.folder import AgentFolder

# The dev extra has it; a bare GPU image does not, and a failed import stops pytest.
pytest.importorskip("kubeflow_trainer_api")
from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

ROOT = Path(__file__).resolve().parents[2]
TRAINJOB = ROOT / "deploy" / "k8s" / "trainjob.yaml"
MULTINODE = ROOT / "deploy" / "k8s" / "multinode-job.yaml"
RUNTIME = {
    "apiGroup": "trainer.kubeflow.org",
    "kind": "ClusterTrainingRuntime",
    "name": "torch-distributed",
}


def _documents(text: str) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text) if doc}


def schema_problems(train_job: dict[str, Any]) -> list[str]:
    """What the TrainJob schema rejects: wrong types, or keys it does not know (paths)."""
    try:
        model = TrainerV1alpha1TrainJob.from_dict(train_job)
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    assert model is not None
    return _differences(train_job, model.to_dict(), "")


def _differences(given: Any, read: Any, path: str) -> list[str]:
    if isinstance(given, dict) and isinstance(read, dict):
        found = [f"{path}.{key}: not in the schema" for key in given.keys() - read.keys()]
        for key in given.keys() & read.keys():
            found += _differences(given[key], read[key], f"{path}.{key}")
        return found
    if isinstance(given, list) and isinstance(read, list) and len(given) == len(read):
        return [
            p
            for i, (g, r) in enumerate(zip(given, read, strict=True))
            for p in _differences(g, r, f"{path}[{i}]")
        ]
    return [] if given == read else [f"{path}: {given!r} read as {read!r}"]


def test_trainjob_matches_the_trainer_api_schema() -> None:
    """The TrainJob reads into kubeflow-trainer-api's TrainJob model with nothing dropped."""
    train_job = _documents(TRAINJOB.read_text())["TrainJob"]
    assert train_job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert schema_problems(train_job) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("numNodes: 2", "numNode: 2", "trainer.numNode: not in the schema"),
        ("numNodes: 2", "numNodes: two", "numNodes"),
        ("runtimeRef:", "runtimeReference:", "runtimeRef"),
        (
            "- name: node\n                template:",
            "- nam: node\n                template:",
            "name",
        ),
        ("readOnly: true", "readonly: true", "readonly: not in the schema"),
    ],
)
def test_schema_check_finds_a_broken_copy(old: str, new: str, problem: str) -> None:
    """Misspelt keys and wrong types are caught, so the schema check can fail."""
    text = TRAINJOB.read_text()
    assert old in text
    train_job = _documents(text.replace(old, new, 1))["TrainJob"]
    problems = schema_problems(train_job)
    assert any(problem in p for p in problems), problems


def _node_pod(train_job: dict[str, Any]) -> dict[str, Any]:
    """The pod-spec patch of the runtime's `node` replicated job."""
    (patch,) = train_job["spec"]["runtimePatches"]
    (replicated,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["name"] == "node"  # the torch-distributed runtime's job name
    return dict(replicated["template"]["spec"]["template"]["spec"])


def trainjob_problems(text: str) -> list[str]:
    """What in a trainjob.yaml text contradicts its comments, the Job and the docs."""
    documents = _documents(text)
    train_job, claim = documents["TrainJob"], documents["PersistentVolumeClaim"]
    spec, trainer = train_job["spec"], train_job["spec"]["trainer"]
    pod = _node_pod(train_job)
    (container,) = pod["containers"]
    problems = []
    if spec["runtimeRef"] != RUNTIME:
        problems.append("not the torch-distributed ClusterTrainingRuntime")
    if trainer["command"] != ["genesis-fp16"] or trainer["args"][0] != "train":
        problems.append("the command is not genesis-fp16 train (it hands off to torchrun)")
    if container["name"] != "node":
        problems.append("the patched container is not the runtime's node container")
    if trainer["numProcPerNode"] != int(trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"]):
        problems.append("numProcPerNode is not the GPUs per node")
    env = {item["name"]: item.get("value") for item in trainer["env"]}
    state = env.get("GENESIS_FP16_STATE_DIR", "")
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    volume = volumes.get(mounts.get(state, ""), {})
    if volume.get("persistentVolumeClaim", {}).get("claimName") != claim["metadata"]["name"]:
        problems.append("the state folder is not on the shared claim")
    if claim != _documents(MULTINODE.read_text())["PersistentVolumeClaim"]:
        problems.append("the claim differs from multinode-job.yaml's")
    agent = trainer["args"][1]
    wanted = f"--checkpoint-dir={AgentFolder(Path(state), agent).checkpoint_dir}"
    if wanted not in trainer["args"]:
        problems.append(
            "--checkpoint-dir is not the daemon's checkpoint folder on the shared state"
        )
    if any(item["name"].startswith("PET_") for item in trainer["env"]):
        problems.append("PET_* are the runtime's to set")
    return problems + _peer_policy_problems(documents["NetworkPolicy"], train_job)


def _peer_policy_problems(policy: dict[str, Any], train_job: dict[str, Any]) -> list[str]:
    """The pods of the run admit each other (rendezvous, NCCL) and nobody else."""
    # JobSet labels every pod with the JobSet's name, which is the TrainJob's.
    run = {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": train_job["metadata"]["name"]}}
    spec = policy["spec"]
    if spec["podSelector"] != run or spec["policyTypes"] != ["Ingress"]:
        return ["the NetworkPolicy does not select the run's pods"]
    if spec["ingress"] != [{"from": [{"podSelector": run}]}]:
        return ["the NetworkPolicy admits more than the run's own pods"]
    return []


def test_trainjob_matches_its_comments_and_the_plain_job() -> None:
    """Runtime, command, GPUs per node, shared claim and checkpoint folder all agree."""
    assert trainjob_problems(TRAINJOB.read_text()) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("name: torch-distributed", "name: torch-fsdp", "torch-distributed"),
        ('command: ["genesis-fp16"]', 'command: ["torchrun"]', "genesis-fp16 train"),
        ("numProcPerNode: 1", "numProcPerNode: 4", "GPUs per node"),
        ("claimName: genesis-fp16-shared-state", "claimName: other", "shared claim"),
        ("storage: 50Gi", "storage: 10Gi", "differs from multinode"),
        ("agents/se_darwin/checkpoints", "checkpoints", "--checkpoint-dir"),
        (
            "jobset-name: genesis-fp16-train\n  policyTypes",
            "jobset-name: x\n  policyTypes",
            "select",
        ),
        ("- podSelector:", "- namespaceSelector: {}\n        - podSelector:", "more than"),
        (
            "- name: node\n                            securityContext",
            "- name: trainer\n                            securityContext",
            "node container",
        ),
    ],
)
def test_trainjob_check_finds_a_broken_copy(old: str, new: str, problem: str) -> None:
    """Each broken copy of the TrainJob is caught, so the check above can fail."""
    text = TRAINJOB.read_text()
    assert old in text
    problems = trainjob_problems(text.replace(old, new, 1))
    assert any(problem in p for p in problems), problems
