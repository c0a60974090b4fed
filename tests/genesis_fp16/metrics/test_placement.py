"""genesis_fp16_device_info: the pod, namespace, host and GPU UUIDs DCGM's series join on."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.metrics.placement import device_labels

DOWNWARD = {"POD_NAME": "genesis-fp16-0", "POD_NAMESPACE": "ml", "NODE_NAME": "gpu-node-7"}


def test_downward_api_and_device_plugin_uuids_become_dcgm_labels() -> None:
    """POD_NAME/POD_NAMESPACE/NODE_NAME and NVIDIA_VISIBLE_DEVICES UUIDs, one set per GPU."""
    environ = {**DOWNWARD, "NVIDIA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb"}
    sets = device_labels(environ)
    assert [(s["gpu"], s["uuid"]) for s in sets] == [("0", "GPU-aaa"), ("1", "GPU-bbb")]
    assert {(s["pod"], s["namespace"], s["hostname"]) for s in sets} == {
        ("genesis-fp16-0", "ml", "gpu-node-7")
    }


def test_a_cpu_host_exports_one_series_with_empty_gpu_labels() -> None:
    """Without GPUs (or with 'all' instead of UUIDs and no CUDA torch) the GPU labels are empty."""
    for environ in (DOWNWARD, {**DOWNWARD, "NVIDIA_VISIBLE_DEVICES": "all"}):
        sets = device_labels(environ)
        if sets[0]["uuid"]:  # a CUDA host: torch listed the real devices
            assert all(s["uuid"].startswith("GPU-") for s in sets)
            continue
        assert sets == [
            {
                **dict(zip(("pod", "namespace", "hostname"), DOWNWARD.values(), strict=True)),
                "gpu": "",
                "uuid": "",
                "model_name": "",
            }
        ]


def test_device_info_is_exported_with_the_join_labels() -> None:
    """The daemon's registry carries genesis_fp16_device_info{pod,namespace,uuid,...} 1."""
    where = {"pod": "genesis-fp16-0", "namespace": "ml", "hostname": "gpu-node-7"}
    placement = [{**where, "gpu": "0", "uuid": "GPU-aaa", "model_name": "H100"}]
    metrics = DaemonMetrics(CollectorRegistry(), version="test", placement=placement)
    text = generate_latest(metrics.registry).decode()
    assert (
        'genesis_fp16_device_info{gpu="0",hostname="gpu-node-7",model_name="H100",'
        'namespace="ml",pod="genesis-fp16-0",uuid="GPU-aaa"} 1.0'
    ) in text


def test_step_seconds_is_the_wall_time_per_step_between_two_logs() -> None:
    """Two summaries 10 steps and 2.5 s apart give 0.25 s a step; a new run starts afresh."""
    from types import SimpleNamespace

    metrics = DaemonMetrics(CollectorRegistry(), version="test")

    def summary(step: int, wall: float) -> SimpleNamespace:
        return SimpleNamespace(
            step=step,
            wall_seconds=wall,
            optimizer_steps=step,
            skipped_steps=0,
            nonfinite_losses=0,
            samples=step,
            loss_scale=1.0,
            overflow_rate_window=0.0,
            grad_norm=1.0,
            train_loss=0.5,
            precision="bf16",
        )

    def value() -> float | None:
        return metrics.registry.get_sample_value("genesis_fp16_step_seconds", {"agent": "a"})

    metrics.start_run("a")
    metrics.observe_summary("a", summary(10, 3.0))
    assert value() is None  # one log says nothing about a step's time
    metrics.observe_summary("a", summary(20, 5.5))
    assert value() == 0.25
    metrics.start_run("a")
    metrics.observe_summary("a", summary(30, 1.0))  # wall restarted: not a negative time
    assert value() == 0.25
