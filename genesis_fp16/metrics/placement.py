"""Where the daemon runs, in the label names NVIDIA's DCGM exporter uses for its GPU series.

A GPU cluster scrapes ``dcgm-exporter``, whose series (``DCGM_FI_DEV_GPU_UTIL``,
``DCGM_FI_DEV_FB_USED``, ...) carry ``gpu``, ``UUID``, ``modelName``, ``Hostname`` and, in
Kubernetes mode, the ``pod`` and ``namespace`` using the GPU. The daemon exports the same
facts once, as ``genesis_fp16_device_info{pod, namespace, hostname, gpu, uuid,
model_name}`` (snake_case, as ``promtool check metrics`` requires), so a query joins the
two after renaming ``uuid`` to DCGM's ``UUID``::

    DCGM_FI_DEV_GPU_UTIL * on(UUID) group_left(pod, namespace)
      label_replace(genesis_fp16_device_info{uuid!=""}, "UUID", "$1", "uuid", "(.+)")

The pod comes from the downward API (``POD_NAME``, ``POD_NAMESPACE``, ``NODE_NAME``; the
StatefulSet sets them), the GPUs from ``NVIDIA_VISIBLE_DEVICES`` when the device plugin put
UUIDs there, else from torch when torch is already loaded and sees CUDA.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Mapping

DOWNWARD_API = {"pod": "POD_NAME", "namespace": "POD_NAMESPACE", "hostname": "NODE_NAME"}
_UUID_PREFIXES = ("GPU-", "MIG-")


def device_labels(environ: Mapping[str, str]) -> list[dict[str, str]]:
    """The pod, namespace and host of this process with each GPU it sees (its index here,
    its UUID as DCGM spells it, its model): one label set per GPU, or one with empty GPU
    labels on a CPU host. Reads the downward API variables and the visible GPUs (never
    starts CUDA itself).

    >>> device_labels({"POD_NAME": "genesis-fp16-0", "POD_NAMESPACE": "ml",
    ...     "NODE_NAME": "gpu-node-7", "NVIDIA_VISIBLE_DEVICES": "GPU-3f2a"})
    [{'pod': 'genesis-fp16-0', 'namespace': 'ml', 'hostname': 'gpu-node-7', 'gpu': '0', \
'uuid': 'GPU-3f2a', 'model_name': ''}]
    """
    where = {label: environ.get(name, "") for label, name in DOWNWARD_API.items()}
    where["hostname"] = where["hostname"] or socket.gethostname()
    models = _torch_models()
    listed = [d.strip() for d in environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",")]
    if not all(d.startswith(_UUID_PREFIXES) for d in listed):  # "all", indexes: torch's
        listed = [uuid for uuid, _ in models]
    gpus = [(str(i), u, models[i][1] if i < len(models) else "") for i, u in enumerate(listed)]
    return [{**where, "gpu": g, "uuid": u, "model_name": m} for g, u, m in gpus or [("", "", "")]]


def _torch_models() -> list[tuple[str, str]]:
    """(UUID, model) of each CUDA device torch sees; empty unless torch is loaded with CUDA."""
    torch = sys.modules.get("torch")  # the daemon's own import; not a reason to load it
    if torch is None or not torch.cuda.is_available():
        return []
    found = []
    for index in range(torch.cuda.device_count()):
        properties = torch.cuda.get_device_properties(index)
        uuid = str(getattr(properties, "uuid", ""))
        found.append(
            (f"GPU-{uuid}" if uuid and not uuid.startswith("GPU-") else uuid, properties.name)
        )
    return found
