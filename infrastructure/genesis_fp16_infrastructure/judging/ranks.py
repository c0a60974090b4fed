"""A judged run under torchrun (:func:`ranked`): rank 0 judges, every rank trains.

Rank 0 scores the served model, watches it, decides and makes the candidate, then tells
the other ranks what came of it in one broadcast: train in that folder (the plugin's
ranks train together; rank 0 then judges alone), or the run's result (nothing to learn),
or why it was refused (one line on every rank). The other ranks read nothing of the
agent's folder: they wait for rank 0's word.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest

# What rank 0 tells: ("train", (folder, finishes)), ("done", result JSON) or
# ("refused", its one line).
Told = tuple[str, Any]
Tell = Callable[[Told], Any]


def ranked(
    request: TrainRequest,
    rank: int,
    judge: Callable[[Tell], TrainResult],
    train: Callable[[TrainRequest], TrainResult],
) -> TrainResult:
    """This rank's part of a judged run (module docstring): rank 0 runs ``judge`` (the
    judged run, which tells the others through the ``Tell`` it is handed); every other
    rank ``train``\\ s as rank 0 says, or returns its result, or refuses as it did."""
    if rank == 0:
        said: list[Told] = []

        def tell(told: Told) -> None:
            said.append(told)
            _broadcast(told)

        try:
            return judge(tell)
        except BaseException as exc:
            if not said:  # the others still wait for rank 0's word
                _broadcast(("refused", f"{type(exc).__name__}: {exc}"))
            raise
    kind, value = _broadcast(None)
    if kind == "train":  # every rank to the same target: rank 0's folder and finishes
        folder, finishes = value
        return train(replace(request, checkpoint_dir=Path(folder), finishes=finishes))
    if kind == "done":
        return TrainResult.from_json(value)
    raise TrainRequestError(f"{request.agent}: rank 0 refused the run: {value}")


def _broadcast(told: Told | None) -> Told:
    """Rank 0's word (``told``) as every rank receives it."""
    import torch.distributed as dist

    box = [told]
    dist.broadcast_object_list(box, src=0)
    assert box[0] is not None
    return box[0]
