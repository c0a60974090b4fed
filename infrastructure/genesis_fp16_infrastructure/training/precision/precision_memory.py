"""The precision guard's memory: an agent's remembered demotion, torch-free.

:class:`PrecisionMemory`, whose floor a request carries as ``floor``, and
:func:`remember_demotions`, the memory after a run; its file is the agent folder's
(``AgentFolder.precision_memory``, ``remember_run``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.record_codec import Record

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.training.reports import Demotion


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


def remember_demotions(
    previous: PrecisionMemory | None, demotions: Sequence[Demotion], keep: int = 10
) -> PrecisionMemory | None:
    """The memory after a run: the last demotion becomes the floor; none counts a clean run."""
    if not demotions:
        if previous is None:
            return None
        return replace(previous, clean_runs=previous.clean_runs + 1)
    last = demotions[-1]
    now = datetime.now(UTC).isoformat(timespec="seconds")
    past = previous.history if previous else ()
    history = (*past, *({**d.to_json(), "at": now} for d in demotions))
    return PrecisionMemory(
        demoted_from=demotions[0].from_ if previous is None else previous.demoted_from,
        demoted_to=last.to,
        reason=last.reason,
        step=last.step,
        rollback_step=last.rollback_step,
        at=now,
        clean_runs=0,
        history=history[-keep:],
    )
