"""deploy/k8s/: built-in kinds checked by kubernetes-validate --strict, the rest by structure.

kubernetes-validate has schemas only for Kubernetes' own kinds, so the ServiceMonitor and
PrometheusRule (Prometheus Operator custom resources) are checked here by structure, the
PrometheusRule's rules by promtool, and the Kubeflow TrainJob by the trainer API's own
models (tests/deploy/test_trainjob.py). The one-pod deployment comes in two StatefulSets
of one name (GPU and CPU): each is checked with the files applied beside it.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from script_module import load_script

from genesis_fp16.config.settings import Settings, load_settings, requested_precision
from genesis_fp16_infrastructure.folder import AgentFolder

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
MULTINODE = K8S / "multinode-job.yaml"
TRAINJOB = K8S / "trainjob.yaml"
GPU_STATEFULSET, CPU_STATEFULSET = K8S / "statefulset.yaml", K8S / "statefulset-cpu.yaml"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tests" / "rules_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "genesis-fp16.json"
# API groups of custom resources, which kubernetes-validate has no schema for.
CUSTOM_GROUPS = ("monitoring.coreos.com/", "trainer.kubeflow.org/")
SHUTDOWN_BOUND_SECONDS = 30  # the daemon's default GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS
AGENTS = ("se_darwin", "rlhf_ppo")  # the built-in plugins
# What the two StatefulSets may differ in: the hardware and what it needs.
DEVICES = {GPU_STATEFULSET.name: "cuda", CPU_STATEFULSET.name: "cpu"}


def _load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _objects(statefulset: Path = GPU_STATEFULSET) -> dict[str, dict[str, Any]]:
    """The one-pod deployment with ``statefulset``: every object, keyed by "Kind/name"."""
    found: dict[str, dict[str, Any]] = {}
    others = {MULTINODE, TRAINJOB, GPU_STATEFULSET, CPU_STATEFULSET} - {statefulset}
    for path in sorted(K8S.glob("*.yaml")):
        if path in others:  # the other StatefulSet; the multi-node runs: their own tests
            continue
        for document in _load(path):
            key = f"{document['kind']}/{document['metadata']['name']}"
            assert key not in found, f"two {key}: {path.name}"
            found[key] = document
    return found


def _documents(statefulset: Path = GPU_STATEFULSET) -> dict[str, dict[str, Any]]:
    """The same objects keyed by kind, for the kinds the deployment has one of."""
    objects = list(_objects(statefulset).values())
    kinds = [doc["kind"] for doc in objects]
    return {doc["kind"]: doc for doc in objects if kinds.count(doc["kind"]) == 1}


def _config(statefulset: Path = GPU_STATEFULSET) -> dict[str, Any]:
    """The settings ConfigMap: the one the StatefulSet mounts."""
    pod = _documents(statefulset)["StatefulSet"]["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if "configMap" in v)
    return _objects(statefulset)[f"ConfigMap/{volume['configMap']['name']}"]


def _built_in_files(tmp_path: Path) -> list[Path]:
    """Each manifest's built-in documents; a file that mixes in custom ones is copied without."""
    files = []
    for path in sorted(K8S.glob("*.yaml")):
        documents = _load(path)
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
        "grafana-dashboard.yaml",
        "multinode-job.yaml",
        "networkpolicy.yaml",
        "poddisruptionbudget.yaml",
        "trainjob.yaml",  # its PersistentVolumeClaim and NetworkPolicy
        "secret.example.yaml",
        "service.yaml",
        "serviceaccount.yaml",
        "statefulset.yaml",
        "statefulset-cpu.yaml",
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


def _image_tags() -> dict[str, str]:
    """The Dockerfile's documented builds: the image tag of each torch build (cpu, cuXYZ)."""
    text = (ROOT / "Dockerfile").read_text()
    tags = {"cpu": re.findall(r"docker build -t (\S+) \.", text)[0]}
    for torch, tag in re.findall(r"docker build --build-arg TORCH=(cu\d+) -t (\S+) \.", text):
        tags[torch] = tag
    return tags


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value") for item in container["env"]}


def _image_env() -> dict[str, str]:
    """The GENESIS_FP16_* variables the Dockerfile's ENV sets: every pod has them."""
    text = (ROOT / "Dockerfile").read_text()
    return dict(re.findall(r"\b(GENESIS_FP16_\w+)=(\S+?)\s*(?:\\|$)", text, flags=re.M))


@pytest.mark.parametrize("statefulset", [GPU_STATEFULSET, CPU_STATEFULSET], ids=DEVICES.get)
def test_statefulset_runs_one_pod_with_state_volume_and_probes(statefulset: Path) -> None:
    """One replica, a PVC template, /livez for liveness, /healthz for readiness, enough grace."""
    sts = _documents(statefulset)["StatefulSet"]
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 1
    # OrderedReady would hold a template update while the pod is not ready (degraded).
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["volumeClaimTemplates"][0]["metadata"]["name"] == "state"
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert _env(container)["GENESIS_FP16_STATE_DIR"] == mounts["state"]
    assert pod["terminationGracePeriodSeconds"] > SHUTDOWN_BOUND_SECONDS
    # /healthz is 503 on a full disk by design: as liveness, a full volume restarts forever.
    assert container["startupProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert "metrics" in {port["name"] for port in container["ports"]}


@pytest.mark.parametrize("statefulset", [GPU_STATEFULSET, CPU_STATEFULSET], ids=DEVICES.get)
def test_statefulset_image_device_and_gpu_agree(statefulset: Path) -> None:
    """GPU: the CUDA image, device cuda, one GPU; CPU: the CPU image, device cpu, no GPU."""
    (container,) = _documents(statefulset)["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    device, tags = DEVICES[statefulset.name], _image_tags()
    assert _env(container)["GENESIS_FP16_DEVICE"] == device
    gpus = container["resources"]["limits"].get("nvidia.com/gpu", 0)
    if device == "cuda":
        assert gpus == 1 and container["image"] in {tags[t] for t in tags if t != "cpu"}
    else:
        assert gpus == 0 and container["image"] == tags["cpu"]


def _without_hardware(sts: dict[str, Any]) -> dict[str, Any]:
    """A StatefulSet less what depends on its hardware: image, device, GPU and its taint."""
    sts = copy.deepcopy(sts)
    pod = sts["spec"]["template"]["spec"]
    pod.pop("tolerations", None)
    (container,) = pod["containers"]
    container.pop("image")
    container["resources"]["limits"].pop("nvidia.com/gpu", None)
    container["env"] = [e for e in container["env"] if e["name"] != "GENESIS_FP16_DEVICE"]
    return sts


def test_cpu_and_gpu_statefulsets_differ_only_in_their_hardware() -> None:
    """The two StatefulSets are one (same name, probes, volumes) but for image, device and GPU."""
    gpu, cpu = (_documents(path)["StatefulSet"] for path in (GPU_STATEFULSET, CPU_STATEFULSET))
    assert _without_hardware(gpu) == _without_hardware(cpu)
    assert gpu != cpu


def test_configmap_is_mounted_as_a_folder_and_named_by_the_env_file_variable() -> None:
    """The ConfigMap is a whole-folder mount (updates arrive) holding GENESIS_FP16_ENV_FILE."""
    documents = _documents()
    config = _config()
    pod = documents["StatefulSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volume = next(v for v in pod["volumes"] if "configMap" in v)
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert "subPath" not in mount, "a subPath mount never sees ConfigMap updates"
    env = _env(container)
    env_file = Path(env["GENESIS_FP16_ENV_FILE"])
    assert env_file.parent == Path(mount["mountPath"])
    assert env_file.name in config["data"]
    # Reloadable settings must not also be pod env vars: env wins over the file.
    file_keys = {
        line.split("=", 1)[0]
        for line in config["data"][env_file.name].splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    }
    assert "GENESIS_FP16_LOG_FORMAT" in file_keys
    # Nor variables of the image: its ENV shadows the file as the pod's env: does, so the
    # metrics address and port live in the Dockerfile, not here (issue 38).
    assert "GENESIS_FP16_METRICS_ADDR" in _image_env()
    assert not file_keys & (set(env) | set(_image_env()))


def _settings_of(
    statefulset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, added: str = ""
) -> Settings:
    """The daemon's settings in the pod: the ConfigMap's file (plus ``added``), the env."""
    (container,) = _documents(statefulset)["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    env = _env(container)
    env_file = tmp_path / Path(env["GENESIS_FP16_ENV_FILE"]).name
    env_file.write_text(_config(statefulset)["data"][env_file.name] + added)
    for name in list(os.environ):
        if name.startswith(("GENESIS_FP16_", "ENABLE_FP16_")):
            monkeypatch.delenv(name)
    for name, value in {**_image_env(), **env}.items():
        if name.startswith("GENESIS_FP16_") and value is not None:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("GENESIS_FP16_ENV_FILE", str(env_file))
    monkeypatch.setenv("GENESIS_FP16_STATE_DIR", str(tmp_path / "state"))
    return load_settings(env_file)


def _forced(settings: Settings) -> list[str]:
    """Each built-in agent whose precision is not left on auto, and why."""
    wanted = {agent: requested_precision(settings, agent, None) for agent in AGENTS}
    return [f"{agent}: {w.reason}" for agent, w in wanted.items() if w.requested != "auto"]


@pytest.mark.parametrize("statefulset", [GPU_STATEFULSET, CPU_STATEFULSET], ids=DEVICES.get)
def test_the_pods_settings_leave_precision_on_auto_for_every_agent(
    statefulset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read by the daemon's own loader, the pod's settings force no precision on any agent."""
    settings = _settings_of(statefulset, tmp_path, monkeypatch)
    assert _forced(settings) == []
    assert settings.device == DEVICES[statefulset.name]
    assert settings.metrics_addr == "0.0.0.0"  # reachable by the scraper, not only the pod


@pytest.mark.parametrize(
    "line", ["ENABLE_FP16_TRAINING=true", "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION=fp16"]
)
def test_the_precision_check_catches_a_forced_precision(
    line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ConfigMap that forces fp16 (on all agents or one) is caught, so the check can fail."""
    settings = _settings_of(GPU_STATEFULSET, tmp_path, monkeypatch, added=line + "\n")
    assert any("se_darwin" in problem for problem in _forced(settings))


def _rollback_example() -> str:
    """The ConfigMap's "roll back to fp32" command, as its comment shows it to be pasted."""
    lines = (K8S / "configmap.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "Roll back to fp32" in line)
    command = []
    for line in lines[start + 1 :]:
        if not line.startswith("#   "):
            if command:
                break
            continue
        command.append(line.removeprefix("#   "))
    return "\n".join(command) + "\n"


# A stand-in kubectl: `get ... -o json` prints the ConfigMap as the API server would (from
# the file's YAML, in $CONFIGMAP), and `replace -f -` stores what it is sent there.
_KUBECTL = """#!/usr/bin/env python3
import json, os, sys
from pathlib import Path
stored = Path(os.environ["CONFIGMAP"])
if sys.argv[1:3] == ["get", "configmap"] and sys.argv[-2:] == ["-o", "json"]:
    print(stored.read_text())
elif sys.argv[1:] == ["replace", "-f", "-"]:
    stored.write_text(json.dumps(json.load(sys.stdin)))
else:
    sys.exit(f"kubectl stand-in: unexpected {sys.argv[1:]}")
"""


def test_the_configmaps_rollback_example_works_pasted_as_written(
    jq: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comment's command, run by bash as written against a stand-in kubectl and the real
    jq, turns fp16 off for every agent, keeps every other line, and can be run twice."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    stored = tmp_path / "configmap.json"
    original = _config()
    stored.write_text(json.dumps(original))
    env = {**os.environ, "CONFIGMAP": str(stored)}
    env["PATH"] = f"{bin_dir}{os.pathsep}{Path(jq).parent}{os.pathsep}{env['PATH']}"
    for _ in range(2):
        result = subprocess.run(
            ["bash", "-c", _rollback_example()], env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
    replaced = json.loads(stored.read_text())
    assert {k: v for k, v in replaced.items() if k != "data"} == {
        k: v for k, v in original.items() if k != "data"
    }
    (name,) = original["data"]
    before, after = original["data"][name].splitlines(), replaced["data"][name].splitlines()
    assert after == [*before, "ENABLE_FP16_TRAINING=false"]
    # Read by the daemon's own loader, the pod now trains every agent in fp32.
    config = Path(tmp_path / "env")
    config.mkdir()
    for variable in list(os.environ):
        if variable.startswith(("GENESIS_FP16_", "ENABLE_FP16_")):
            monkeypatch.delenv(variable)
    (config / name).write_text(replaced["data"][name])
    settings = load_settings(env_file=config / name)
    assert settings.enable_fp16_training is False
    assert {requested_precision(settings, a, None).requested for a in AGENTS} == {"fp32"}


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


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a matchLabels-only selector selects ``labels`` (an empty one selects all)."""
    assert set(selector) <= {"matchLabels"}, "only matchLabels selectors are checked here"
    return selector.get("matchLabels", {}).items() <= labels.items()


def _guard_problems(objects: dict[str, dict[str, Any]]) -> list[str]:
    """What about the ServiceAccount, PDB, NetworkPolicy and Service leaves the pod exposed."""
    sts = next(doc for key, doc in objects.items() if key.startswith("StatefulSet/"))
    labels = sts["spec"]["template"]["metadata"]["labels"]
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    account = objects.get(f"ServiceAccount/{pod.get('serviceAccountName')}")
    problems = []
    if account is None or account.get("automountServiceAccountToken") is not False:
        problems.append("the pod's own ServiceAccount mounts a token (or is missing)")
    if pod.get("automountServiceAccountToken") is not False:
        problems.append("the pod mounts a service account token")
    budgets = [d for k, d in objects.items() if k.startswith("PodDisruptionBudget/")]
    if [
        b["spec"].get("minAvailable") for b in budgets if _matches(b["spec"]["selector"], labels)
    ] != [sts["spec"]["replicas"]]:
        problems.append("no PodDisruptionBudget keeps the pod from a voluntary eviction")
    policies = [d for k, d in objects.items() if k.startswith("NetworkPolicy/")]
    selecting = [n for n in policies if _matches(n["spec"]["podSelector"], labels)]
    if len(selecting) != 1 or selecting[0]["spec"]["policyTypes"] != ["Ingress"]:
        problems.append("not exactly one NetworkPolicy isolates the pod's ingress")
    else:
        problems += _scraper_only(selecting[0], container)
    service = next(d for k, d in objects.items() if k.startswith("Service/"))
    if not service["spec"].get("publishNotReadyAddresses"):
        problems.append("a degraded (not ready) pod would no longer be scraped")
    return problems


def _scraper_only(policy: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """The policy admits one peer (a pod in a namespace, both required) on the metrics port."""
    metrics = {p["name"] for p in container["ports"] if p["name"] == "metrics"}
    rules = policy["spec"]["ingress"]
    problems = [] if rules else ["the scraper is not admitted"]
    for rule in rules:
        if not metrics or {port["port"] for port in rule.get("ports", [])} != metrics:
            problems.append("the NetworkPolicy admits more than the metrics port")
        if not _one_labelled_pod_in_a_labelled_namespace(rule.get("from", [])):
            problems.append("the NetworkPolicy admits more than the scraper's pods")
    return problems


def _one_labelled_pod_in_a_labelled_namespace(peers: list[dict[str, Any]]) -> bool:
    """One peer whose pod and namespace selectors both name labels (in one entry: AND)."""
    if len(peers) != 1 or set(peers[0]) != {"namespaceSelector", "podSelector"}:
        return False  # two entries are OR: a whole namespace, or the pods anywhere
    return all(selector.get("matchLabels") for selector in peers[0].values())


@pytest.mark.parametrize("statefulset", [GPU_STATEFULSET, CPU_STATEFULSET], ids=DEVICES.get)
def test_the_pod_has_its_account_budget_and_network_policy(statefulset: Path) -> None:
    """No API token, a budget on voluntary evictions, ingress from the scraper only."""
    assert _guard_problems(_objects(statefulset)) == []


def _edited(key: str, edit: Any) -> dict[str, dict[str, Any]]:
    objects = copy.deepcopy(_objects())
    edit(objects[key])
    return objects


@pytest.mark.parametrize(
    ("key", "edit", "problem"),
    [
        ("ServiceAccount/genesis-fp16", lambda d: d.pop("automountServiceAccountToken"), "token"),
        (
            "StatefulSet/genesis-fp16",
            lambda d: d["spec"]["template"]["spec"].pop("automountServiceAccountToken"),
            "mounts a service",
        ),
        (
            "PodDisruptionBudget/genesis-fp16",
            lambda d: d["spec"]["selector"]["matchLabels"].update(app="x"),
            "Budget",
        ),
        (
            "NetworkPolicy/genesis-fp16",
            lambda d: d["spec"]["ingress"][0].pop("ports"),
            "metrics port",
        ),
        (
            "NetworkPolicy/genesis-fp16",
            lambda d: d["spec"]["ingress"][0]["from"][0].pop("namespaceSelector"),
            "scraper",
        ),
        (
            "NetworkPolicy/genesis-fp16",
            lambda d: d["spec"]["ingress"][0]["from"][0]["podSelector"].pop("matchLabels"),
            "scraper",
        ),
        (
            "NetworkPolicy/genesis-fp16",
            lambda d: d["spec"].update(podSelector={"matchLabels": {"a": "b"}}),
            "isolates",
        ),
        ("Service/genesis-fp16", lambda d: d["spec"].pop("publishNotReadyAddresses"), "scraped"),
    ],
)
def test_the_guard_check_catches_a_broken_copy(key: str, edit: Any, problem: str) -> None:
    """Each weakened copy of the account, budget, policy or Service is caught."""
    problems = _guard_problems(_edited(key, edit))
    assert any(problem in p for p in problems), problems


def _generator() -> ModuleType:
    return load_script(K8S / "generate.py", "k8s_generate")


def test_generated_manifests_match_rules_and_dashboard() -> None:
    """prometheusrule.yaml and grafana-dashboard.yaml are what their sources make today."""
    stale = [str(path.relative_to(ROOT)) for path in _generator().stale()]
    assert stale == [], f"stale: {stale}; run `python deploy/k8s/generate.py`"


def test_the_drift_check_catches_an_edited_source(tmp_path: Path) -> None:
    """After an edit of rules.yml or the dashboard, the generated files are reported stale."""
    generator = _generator()
    sources = [RULES, DASHBOARD] + [ROOT / path for path in generator.GENERATED]
    for path in sources:
        (tmp_path / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, tmp_path / path.relative_to(ROOT))
    assert generator.stale(tmp_path) == []
    rules = tmp_path / RULES.relative_to(ROOT)
    rules.write_text(rules.read_text().replace("> 0.05", "> 0.5"))
    dashboard = tmp_path / DASHBOARD.relative_to(ROOT)
    dashboard.write_text(dashboard.read_text().replace('"genesis-fp16"', '"other"', 1))
    assert {path.name for path in generator.stale(tmp_path)} == {
        "prometheusrule.yaml",
        "grafana-dashboard.yaml",
    }


def test_prometheus_rule_and_dashboard_configmap_carry_their_sources() -> None:
    """The PrometheusRule's spec is rules.yml; the sidecar's label and the JSON are exact."""
    objects = _objects()
    rule = objects["PrometheusRule/genesis-fp16"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    dashboard = objects["ConfigMap/genesis-fp16-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = dashboard["data"].values()
    assert text == DASHBOARD.read_text() and json.loads(text)["uid"] == "genesis-fp16"


def _promtool_on_the_rule(promtool: str, tmp_path: Path, rule: dict[str, Any]) -> list[str]:
    """promtool's check and rule unit tests, run on the PrometheusRule's spec as rules.yml."""
    (tmp_path / "tests").mkdir()
    shutil.copy(RULE_TESTS, tmp_path / "tests" / RULE_TESTS.name)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rule["spec"]))
    failures = []
    for args in (
        ["check", "rules", "--lint=all", "--lint-fatal", "rules.yml"],
        ["test", "rules", f"tests/{RULE_TESTS.name}"],
    ):
        result = subprocess.run(
            [promtool, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        if result.returncode != 0:
            failures.append(f"{' '.join(args[:2])}: {result.stdout}{result.stderr}")
    return failures


def test_prometheus_rule_passes_promtool_and_the_rule_unit_tests(
    promtool: str, tmp_path: Path
) -> None:
    """The rules the Operator loads pass promtool check and every rule unit test."""
    assert (
        _promtool_on_the_rule(promtool, tmp_path, _objects()["PrometheusRule/genesis-fp16"]) == []
    )


def test_promtool_on_the_rule_catches_a_loosened_threshold(promtool: str, tmp_path: Path) -> None:
    """A PrometheusRule with a changed threshold fails the unit tests, so the check can fail."""
    text = (K8S / "prometheusrule.yaml").read_text().replace("rate > 0.05", "rate > 0.5")
    rule = yaml.safe_load(text)
    (failure,) = _promtool_on_the_rule(promtool, tmp_path, rule)
    assert failure.startswith("test rules") and "GenesisFp16HighOverflowRate" in failure


TORCHRUN_CLOSE_SECONDS = 30  # torchrun SIGKILLs ranks this long after forwarding SIGTERM


def _multinode(text: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The Service, Job and PersistentVolumeClaim of one multinode-job.yaml text."""
    documents = {doc["kind"]: doc for doc in yaml.safe_load_all(text) if doc}
    return documents["Service"], documents["Job"], documents["PersistentVolumeClaim"]


def _peer_problems(text: str) -> list[str]:
    """The run's pods admit each other (rendezvous, NCCL's own ports), nobody else; no token."""
    documents = {doc["kind"]: doc for doc in yaml.safe_load_all(text) if doc}
    job, policy = documents["Job"], documents["NetworkPolicy"]["spec"]
    run = {"matchLabels": {"job-name": job["metadata"]["name"]}}  # the Job controller's label
    problems = []
    if policy["podSelector"] != run or policy["policyTypes"] != ["Ingress"]:
        problems.append("the NetworkPolicy does not select the run's pods")
    if policy["ingress"] != [{"from": [{"podSelector": run}]}]:
        problems.append("the NetworkPolicy admits more than the run's own pods")
    if job["spec"]["template"]["spec"].get("automountServiceAccountToken") is not False:
        problems.append("the pods mount a service account token")
    return problems


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
    problems += _peer_problems(text)
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
    if Path(flags.get("--checkpoint-dir", "")) != AgentFolder(Path(state), agent).checkpoint_dir:
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
        ("automountServiceAccountToken: false", "automountServiceAccountToken: true", "token"),
        (
            "- from:\n        - podSelector:",
            "- from:\n        - ipBlock: {cidr: 0.0.0.0/0}\n        - podSelector:",
            "more than the run's",
        ),
        (
            "      job-name: genesis-fp16-train\n  policyTypes",
            "      job-name: x\n  policyTypes",
            "NetworkPolicy does not select",
        ),
    ],
)
def test_multinode_check_finds_a_broken_copy(old: str, new: str, problem: str) -> None:
    """Each broken copy of the Job manifest is caught, so the check above can fail."""
    text = MULTINODE.read_text()
    assert old in text
    problems = _multinode_problems(text.replace(old, new, 1))
    assert any(problem in p for p in problems), problems


def test_docs_say_what_the_probes_do_and_both_deployments_train_on_one_budget() -> None:
    """Liveness asks /livez, which a degraded daemon passes: no doc may say a degraded pod is
    restarted by it; Kubernetes and systemd both train each agent's own budget."""
    for statefulset in (GPU_STATEFULSET, CPU_STATEFULSET):
        (container,) = _documents(statefulset)["StatefulSet"]["spec"]["template"]["spec"][
            "containers"
        ]
        assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    docs = (ROOT / "docs" / "operations.md").read_text()
    assert "liveness probe restarts the pod" not in " ".join(docs.split())
    config = _config()["data"]["genesis-fp16.env"]
    active = [line for line in config.splitlines() if not line.lstrip().startswith("#")]
    units = " ".join(p.read_text() for p in (ROOT / "deploy" / "systemd").iterdir() if p.is_file())
    assert not any("STEPS_PER_RUN" in line for line in active)
    assert "STEPS_PER_RUN=" not in units
