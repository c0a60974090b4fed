"""What a run's own evaluation already computed of its candidate, for the gate (issue 90).

se_darwin's run evaluates its model on the held-out part at its end (``fit()``'s
``evaluate``, the run's eval phase): the held-out fifth the judged run holds out, with
the weights the checkpoint serves. The gate then asks ``score_records`` for that
checkpoint's losses on the held-out records the served model did not train on: the same
records, the same weights, the same encoder. The run keeps its logits here
(:func:`keep_evaluated`), and the scoring takes them (:func:`evaluated_logit`) instead of
encoding those records and running the ensemble over them a second time: at 100,000
records, one forward of 5 members over 20,000 rows.

Kept only where the two computations are the same one: a held-out split's ensemble (not
cross-validated: its evaluation is out of fold), the run's own checkpoint (no final_fit
refit: that is another model), fp32 on the CPU, eager steps, one process. The scoring
takes them only for the file of those bytes (its SHA-256: the judged run scores a copy)
whose served weights are the ones evaluated (:func:`weights_digest`), for a scoring of
the same plan (``request.snapshot``: the same daemon run), and only when
every record it asks for was evaluated; anything else is scored as before. The logits are
those of one chunked forward over the held-out part (``predict.forward_chunked``): a
scoring of a part of it may have differed from them in a last bit, as any part scored
alone may.
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.schema import find_ids
from genesis_fp16_infrastructure.training import FitResult
from genesis_fp16_infrastructure.training.checkpoint_load import noted_digest, saved_digest
from genesis_fp16_infrastructure.training.distributed import rank_and_world


@dataclass(frozen=True)
class _Evaluated:
    """A candidate's P(success) logits on its held-out records, as its run's evaluation
    computed them (``WorldModelTask.held_out_evaluation``): the gate asks the same checkpoint
    for the same records right after, and takes them from here (:func:`keep_evaluated`).
    Kept while the run's plan lives, for the checkpoint of those bytes alone."""

    plan: weakref.ref[Any]
    digest: str  # the checkpoint file's SHA-256
    weights: str  # the evaluated weights' (weights_digest): the scoring's must be these
    # The records' judged-id hashes and their logits, in the order evaluated: a scoring
    # that asks for the very records evaluated, in that order (the gate's), takes them
    # whole, each record compared, no sort and no search (a sort of the held-out fifth's
    # hashes was 1 ms of every later run at 100,000 records, for a search it never made).
    hashes: np.ndarray
    logit: torch.Tensor

    @functools.cached_property
    def ranked(self) -> tuple[np.ndarray, np.ndarray]:
        """The hashes sorted, and the order that sorts them: for a scoring that asks for
        other records, or in another order (sorted once, when first asked)."""
        order = np.argsort(self.hashes, kind="stable")
        return self.hashes[order], order


_EVALUATED: list[_Evaluated] = []  # at most one: the last run's candidate


def scored_alike(request: TrainRequest, result: FitResult) -> bool:
    """Whether the run's evaluation computed what ``score_records`` computes of its
    checkpoint (module docstring): fp32, eager, on the CPU, one process, a checkpoint
    written by this run."""
    return (
        request.device == "cpu"
        and result.precision.used == "fp32"
        and result.execution.used == "eager"
        and rank_and_world()[1] == 1
        and result.steps_run > 0
        and result.checkpoint is not None
    )


def keep_evaluated(
    request: TrainRequest,
    checkpoint: Path,
    judged: np.ndarray,
    evaluation: tuple[torch.Tensor, str],
) -> None:
    """Keep a run's evaluation of ``checkpoint`` (``evaluation``: its logits and the
    :func:`weights_digest` of the weights that computed them; fp32, eager, on the CPU:
    what ``score_records`` computes) on the records whose judged-id hashes are
    ``judged``, for the scorings of the same plan (``request.snapshot``); none without one."""
    checked = request.snapshot.data if request.snapshot is not None else None
    logit, weights = evaluation
    if checked is None or len(judged) != len(logit):
        return
    hashes = np.array(judged, copy=True)  # its own: the caller's may change
    hashes.flags.writeable = False
    digest = checkpoint_digest(checkpoint)
    kept = _Evaluated(weakref.ref(checked), digest, weights, hashes, logit.detach().clone())
    _EVALUATED[:] = [kept]
    weakref.finalize(checked, _forget_evaluated)


def _forget_evaluated() -> None:
    if _EVALUATED and _EVALUATED[0].plan() is None:
        _EVALUATED.clear()


def evaluated_logit(
    request: TrainRequest, checkpoint: Path, model: nn.Module, judged: np.ndarray
) -> torch.Tensor | None:
    """The kept logits of ``checkpoint`` on the records ``judged`` (their judged-id hashes),
    when this plan's run evaluated that very file, with the weights of ``model`` (the
    scoring's: the checkpoint's served weights), on every one of them; else None."""
    checked = request.snapshot.data if request.snapshot is not None else None
    kept = _EVALUATED[0] if _EVALUATED else None
    if kept is None or checked is None or kept.plan() is not checked or not len(judged):
        return None
    at = None  # the records evaluated, in their order (each compared): taken whole
    if len(kept.hashes) != len(judged) or not np.array_equal(kept.hashes, judged):
        ranked, order = kept.ranked
        found_at, found = find_ids(ranked, judged)  # searched in sorted order (~4x faster)
        if not found.all():
            return None
        at = order[found_at]
    if checkpoint_digest(checkpoint) != kept.digest:
        return None
    if weights_digest(model) != kept.weights:
        return None
    return kept.logit.clone() if at is None else kept.logit[torch.from_numpy(at)]


def weights_digest(model: nn.Module) -> str:
    """A digest of a model's weights, names and bits (a DDP or FSDP wrapper's: its
    module's); a few hundred kilobytes hashed."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in getattr(model, "module", model).state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def checkpoint_digest(path: Path) -> str:
    """A checkpoint file's hex SHA-256: which model a kept output is of. The judged run
    hashed the copy it scores already, and noted it (``note_hashed``): that digest,
    while the file's stat is unchanged, not a second read and hash (two a scoring). The
    checkpoint the run saved last: the digest of the bytes it wrote (``saved_digest``),
    not read back (a file changed since matches no output kept under it)."""
    noted = noted_digest(path) or saved_digest(path)
    if noted is not None:
        return noted
    with Path(path).open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()
