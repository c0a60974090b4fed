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
from dataclasses import dataclass

DOWNWARD_API = {"pod": "POD_NAME", "namespace": "POD_NAMESPACE", "hostname": "NODE_NAME"}
_UUID_PREFIXES = ("GPU-", "MIG-")


@dataclass(frozen=True)
class Gpu:
    """One GPU this process sees: its index here, its UUID as DCGM spells it, its model."""

    gpu: str
    uuid: str  # "GPU-...", as DCGM's UUID label spells it
    model_name: str = ""


@dataclass(frozen=True)
class Placement:
    """The pod, namespace and host of this process, and its GPUs (none on a CPU host).

    >>> Placement.from_environ({"POD_NAME": "genesis-fp16-0", "POD_NAMESPACE": "ml",
    ...     "NODE_NAME": "gpu-node-7", "NVIDIA_VISIBLE_DEVICES": "GPU-3f2a"}).label_sets()
    [{'pod': 'genesis-fp16-0', 'namespace': 'ml', 'hostname': 'gpu-node-7', 'gpu': '0', \
'uuid': 'GPU-3f2a', 'model_name': ''}]
    """

    pod: str
    namespace: str
    hostname: str
    gpus: tuple[Gpu, ...] = ()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Placement:
        """Read the downward API variables and the visible GPUs (never starts CUDA itself)."""
        where = {label: environ.get(name, "") for label, name in DOWNWARD_API.items()}
        if not where["hostname"]:
            where["hostname"] = socket.gethostname()
        return cls(**where, gpus=_visible_gpus(environ))

    def label_sets(self) -> list[dict[str, str]]:
        """One label set per GPU, or one with empty GPU labels on a CPU host."""
        gpus = self.gpus or (Gpu("", "", ""),)
        base = {"pod": self.pod, "namespace": self.namespace, "hostname": self.hostname}
        return [{**base, "gpu": g.gpu, "uuid": g.uuid, "model_name": g.model_name} for g in gpus]


def _visible_gpus(environ: Mapping[str, str]) -> tuple[Gpu, ...]:
    models = _torch_models()
    listed = [d.strip() for d in environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",")]
    if listed and all(d.startswith(_UUID_PREFIXES) for d in listed):
        return tuple(
            Gpu(str(i), uuid, models[i][1] if i < len(models) else "")
            for i, uuid in enumerate(listed)
        )
    return tuple(Gpu(str(i), uuid, name) for i, (uuid, name) in enumerate(models))


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
