"""The precision memory: what a daemon remembers about an agent's demotions.

A small JSON file per agent (the precision state file), so that a restarted daemon does
not go back to the precision that failed. Importable without torch::

    memory = remember_demotions(read_precision_memory(path), result.demotions)
    write_precision_memory(path, memory)
    if memory is not None and memory.applies_to("fp16"):
        precision = memory.demoted_to
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import PRECISION_STATE
from genesis_fp16_infrastructure.training.precision.precision_names import (
    PRECISIONS,
    PrecisionName,
    less_robust,
)
from genesis_fp16_infrastructure.training.reports import Demotion

MEMORY_VERSION = 1
# A memory of ten demotions is about 3 KB; a file over this bound is not one.
MAX_MEMORY_BYTES = PRECISION_STATE.limit


@dataclass(frozen=True)
class PrecisionMemory:
    """What a daemon remembers about one agent's demotions (the precision state file).

    ``demoted_to`` is a floor: later runs of the agent train in ``demoted_to`` whenever
    they would run in a less robust precision (fp16 < bf16 < fp32). ``clean_runs``
    counts runs since that finished without a demotion (for optional promotion).
    """

    demoted_from: PrecisionName | Literal["unknown"]  # unknown: set after an unusable file
    demoted_to: PrecisionName
    reason: str
    step: int
    rollback_step: int
    at: str
    clean_runs: int = 0
    history: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)

    def applies_to(self, precision: PrecisionName) -> bool:
        """True when ``precision`` is less robust than the remembered floor."""
        return less_robust(precision, self.demoted_to)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["history"] = [dict(h) for h in self.history]
        return {"version": MEMORY_VERSION, **out}


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


def read_precision_memory(path: Path) -> PrecisionMemory | None:
    """Load the state file; None when there is none. A broken file raises ValueError
    (:class:`~genesis_fp16_infrastructure.agent_folder.files.UnusableStateFile` for a folder, FIFO,
    link, a file over ``MAX_MEMORY_BYTES`` or bytes that are not UTF-8)."""
    data = files.read_json(Path(path), PRECISION_STATE)  # UnusableStateFile: unusable
    if data is None:
        return None
    try:
        if data.get("version") != MEMORY_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {MEMORY_VERSION}")
        fields = {k: data[k] for k in PrecisionMemory.__dataclass_fields__ if k in data}
        fields["history"] = tuple(fields.get("history", ()))
        memory = PrecisionMemory(**fields)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"precision state file {str(path)!r} is unreadable: {exc}") from None
    if memory.demoted_to not in PRECISIONS:
        raise ValueError(
            f"precision state file {str(path)!r}: demoted_to={memory.demoted_to!r} is not "
            f"one of {', '.join(PRECISIONS)}"
        )
    return memory


def write_precision_memory(path: Path, memory: PrecisionMemory | None) -> None:
    """Write the state file atomically (see genesis_fp16_infrastructure.atomic); None deletes it."""
    path = Path(path)
    if memory is None:
        path.unlink(missing_ok=True)
        return
    files.write_json(path, PRECISION_STATE, memory.to_json())
