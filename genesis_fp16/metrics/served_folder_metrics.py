"""The agent's served model and checkpoint folder as its last run left them: pinned by
an operator, a pointer set aside as unusable, the folder's bytes and the candidates
pruned (genesis_fp16/jobs/recording.py's check_served_pointer before each run and, at
its end, model_history.py's bound_agent_history set them).

>>> from prometheus_client import CollectorRegistry
>>> folder = ServedFolderMetrics(Families(CollectorRegistry()))
>>> folder.pinned.labels(agent="se_darwin").set(1)
"""

from __future__ import annotations

from genesis_fp16.metrics.metric_names import Families


class ServedFolderMetrics:
    """The served folder's gauges, each labelled by ``agent``."""

    def __init__(self, families: Families) -> None:
        gauge = families.gauge
        self.pinned = gauge(
            "served_model_pinned",
            "1 while an operator's `model promote`/`model rollback` pins the served model "
            "(the gate then holds better candidates instead of serving them), else 0; as "
            "of the agent's last scheduled run.",
        )
        self.pointer_unusable = gauge(
            "served_pointer_unusable",
            "1 while the agent's served-model pointer is unusable (unreadable, another "
            "version, or naming a missing checkpoint: set aside, nothing served until "
            "`model promote`/`model rollback` repairs it), else 0.",
        )
        self.state_bytes = gauge(
            "agent_state_bytes",
            "Bytes of the agent's checkpoint folder (served, kept and rejected models).",
        )
        self.pruned = gauge(
            "models_pruned", "Candidate folders removed by the bounded history at the last run."
        )
