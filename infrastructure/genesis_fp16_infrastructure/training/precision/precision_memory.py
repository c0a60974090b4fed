"""The precision guard's memory: an agent's remembered demotion, torch-free.

:class:`PrecisionMemory`, whose floor a request carries as ``floor``; its file is the
agent folder's (``AgentFolder.precision_memory``, ``remember_run``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.record_codec import Record


@dataclass(frozen=True)
class PrecisionMemory(Record):
    """What a daemon remembers about one agent's demotions (the precision state file,
    with its ``version``: ``to_json`` and ``from_json`` are the record codec's).

    ``demoted_to`` is a floor: later runs of the agent train in ``demoted_to`` whenever
    they would run in a less robust precision (fp16 < bf16 < fp32). ``clean_runs``
    counts runs since that finished without a demotion (for optional promotion).
    """

    VERSION = 1

    demoted_from: PrecisionName | Literal["unknown"]  # unknown: set after an unusable file
    demoted_to: PrecisionName
    reason: str
    step: int
    rollback_step: int
    at: str
    clean_runs: int = 0
    history: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
