"""The promotion gate: a candidate replaces the served model only if it is no worse.

Both models are scored on the same records, each record by a network that never trained
on it (:func:`comparison_mask` states the rule), and, when the operator names one
(``GENESIS_FP16_AGENTS__<AGENT>__GOLDEN_DATA``), on a fixed trusted pool. The candidate
carries the burden of proof: it passes a set only when the evidence says it is no worse
than the served model by more than a small stated margin, at 95% (one-sided)::

    d_i   = candidate − served log-loss of record i              (paired, per record)
    pass: mean(d) + 1.645 · s.e.(d)                  ≤ MARGIN_LOG_LOSS  (0.01 nats)
    and:  (served − candidate AUC) + 1.645 · s.e.    ≤ MARGIN_AUC       (0.02; DeLong, paired)

A candidate that scores worse by the point estimate is promoted only when the set is
large enough to bound its loss below the margin; a small set proves little, so it
rejects a candidate that is merely not shown worse. With under ``PROOF_CLASS`` (50)
records of a class the AUC's bound is too wide to prove anything: the log-loss carries
the proof, and the AUC vetoes only a candidate reliably worse (its lower bound past the
margin). Before issue 51 the rule was the opposite (promoted unless worse by 2 standard
errors), so a run of promotions could each lose up to that and ratchet the model down.

A set under ``MIN_RECORDS`` records cannot decide; one with under ``MIN_CLASS`` records
of a class compares log-loss alone (its AUC would be luck) and says so. When no set can
decide, the gate says so (``decided=False``) and the run fails loudly, never passes.

Which records a model did not train on (``held_out_for``):

* a **cross-validated** model (folds drawn from (seed, id), stable as the pool grows):
  every record, scored by the member of the record's fold, which never trained on it
  (a new record by the same member: no member trained on it);
* a **held-out** model: records outside the pool it read (new ids), and those of its
  held-out part, drawn as its run drew them (its seed, eval_fraction and split hash
  version, ``split.Draw``); its validation part chose its weights and is left out.

The comparison set is every current record that both models may be scored on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import torch

from genesis_fp16_infrastructure.contract.reports import GateComparison, GateReport, GateScores
from genesis_fp16_infrastructure.data.fingerprint import (
    DataFingerprint,
    example_id_hashes,
    held_in,
)
from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.schema import Example
from genesis_fp16_infrastructure.recipes.retrain.split import Draw, split_version
from genesis_fp16_infrastructure.training.run.early_stop import served_weights
from genesis_fp16_infrastructure.world_model.features import (
    Categorical,
    FeatureEncoder,
    numeric_columns,
    numeric_rows,
)
from genesis_fp16_infrastructure.world_model.metrics import (
    auc_with_interval,
    paired_auc_difference,
)
from genesis_fp16_infrastructure.world_model.model import ModelConfig, build_world_model
from genesis_fp16_infrastructure.world_model.predict import read_world_model_state

MIN_RECORDS = 50  # fewer records (or under 10 of a class): the AUC is mostly luck
MIN_CLASS = 10
# Under this many records of a class the AUC's paired bound is too wide to carry a proof
# (30 successes: about ±0.05): the log-loss carries it, and the AUC only vetoes a
# candidate that is reliably worse (its lower bound past the margin), said so.
PROOF_CLASS = 50
# The non-inferiority margins: how much worse a candidate may be shown at most. Chosen so
# that clean growth on the daemon's 2,000-record sample pool is promoted (measured in
# benchmarks/results/promotion_gate_*.md) and the issue-51 case (held-out AUC 0.758 vs
# 0.769, log-loss 0.617 vs 0.592 on 1,057 records) is not.
MARGIN_AUC = 0.02
MARGIN_LOG_LOSS = 0.01
Z_ONE_SIDED = 1.645  # 95% one-sided: the upper bound of how much worse


@dataclass(frozen=True)
class Verdict:
    """The gate's decision: ``promote`` only when ``decided``; ``reason`` in one line."""

    decided: bool
    promote: bool
    reason: str
    comparisons: Sequence[GateComparison] = field(default_factory=tuple)
    seconds: float = 0.0

    @property
    def outcome(self) -> Literal["promoted", "rejected", "undecided"]:
        if not self.decided:
            return "undecided"
        return "promoted" if self.promote else "rejected"

    def report(self, **fields: Any) -> GateReport:
        """The verdict as the run reports it, with ``fields`` (the precision, the model
        held against, the checkpoint) and the first set's scores of each model."""
        report = GateReport(self.outcome, self.reason, tuple(self.comparisons), self.seconds)
        candidate, served = report.first_scores("candidate"), report.first_scores("served")
        return replace(report, candidate=candidate, served=served, **fields)


@dataclass(frozen=True, eq=False)
class Records:
    """What the gate reads of a set of labelled records: their ids (for the folds), 0/1
    success labels, the encoder's categorical inputs and the unscaled numeric features
    (``numeric_columns``), in one order. From a read's columns (:meth:`of_columns`: the
    run's records, no object per record) or from objects (:meth:`of_examples`: the
    golden set); the same values either way.

    >>> held_out = Records.of_columns(data.columns, np.flatnonzero(mask))  # doctest: +SKIP
    >>> compare_on("held_out", held_out, candidate, served, True)  # doctest: +SKIP
    """

    ids: Sequence[str]
    labels: torch.Tensor  # float32, 1.0 where the record succeeded
    categorical: Categorical
    numeric: torch.Tensor  # (records, NUMERIC_FEATURES) float64
    id_hashes: np.ndarray  # int64: each id's record_id_hash (the folds of split hash 2)

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def of_columns(
        cls, columns: PoolColumns, picked: np.ndarray, numeric: torch.Tensor | None = None
    ) -> Records:
        """The read's examples ``picked`` (indices into its examples, in order);
        ``numeric``: theirs, when the caller has them."""
        rows = columns.labelled[picked]
        ids = columns.example_ids
        return cls(
            [ids[i] for i in picked.tolist()],
            torch.from_numpy(columns.success[picked]).float(),
            Categorical.of_rows(columns, rows),
            pool_numeric(columns, rows) if numeric is None else numeric,
            columns.id_hash[rows],
        )

    @classmethod
    def of_examples(
        cls, examples: Sequence[Example], pool: Pool, numeric: torch.Tensor | None = None
    ) -> Records:
        """``examples`` with their lineage in ``pool``; ``numeric``: theirs, if known."""
        attempts = [e.attempt for e in examples]
        return cls(
            [e.trajectory_id for e in examples],
            torch.tensor([float(e.label.success) for e in examples]),
            Categorical.of(attempts),
            numeric_columns(attempts, pool) if numeric is None else numeric,
            np.array(example_id_hashes(examples), dtype=np.int64).reshape(len(examples)),
        )


def pool_numeric(columns: PoolColumns, rows: np.ndarray) -> torch.Tensor:
    """``numeric_columns`` of the pool's ``rows``, from the arrays; where those cannot
    give them (``numeric_rows`` returns None), from the rows' objects and the whole
    pool's (seconds on a million records: the fallback, not the rule)."""
    numeric = numeric_rows(columns, rows)
    if numeric is None:
        numeric = numeric_columns(columns.attempts(rows), columns.pool())
    return numeric


class ScoredModel:
    """A world-model checkpoint ready to score records: its network, encoder, and what
    it trained on (its split and the fingerprint of the pool it read)."""

    def __init__(self, state: Mapping[str, Any]) -> None:
        saved = read_world_model_state(state)
        self.config = ModelConfig.from_dict(saved["model"])
        self.model = build_world_model(self.config).eval()
        self.model.load_state_dict(served_weights(state))
        self.encoder = FeatureEncoder.from_state(saved["encoder"])
        split = saved.get("split") or {}
        self.seed = int(split.get("seed", 0))
        self.eval_fraction = float(split.get("eval_fraction", 0.0))
        self.folds = int(split.get("folds", 0))
        self.split_hash = split_version(saved)  # how its parts and folds were drawn
        seen = DataFingerprint.from_state(saved.get("data"))
        # The id hashes of the pool it read, as an array (a set of a million ints: 60 MB)
        self.pool_ids = seen.ids.numpy() if seen is not None else None

    def held_out_for(self, hashes: RecordHashes) -> np.ndarray:
        """Which records this model never trained on (see the module docstring), of the
        records ``hashes`` (shared with the other model's call), as a bool array."""
        if self.folds > 1:
            return np.ones(len(hashes), dtype=np.bool_)
        if self.pool_ids is None:  # its data is unknown: it may have seen any
            return np.zeros(len(hashes), dtype=np.bool_)
        return hashes.held_out(self.pool_ids, self.seed, self.eval_fraction, self.split_hash)

    def success_probability(self, records: Records, out_of_fold: bool) -> torch.Tensor:
        """P(success) per record; ``out_of_fold``: each from its fold's member."""
        x = self.encoder.encode_parts(records.categorical, records.numeric)
        with torch.no_grad():
            if out_of_fold and self.folds > 1:
                logits = self.model(x, per_member=True).success_logit  # (members, n)
                draw = Draw(records.ids, records.id_hashes)
                fold = torch.from_numpy(draw.folds(self.seed, self.folds, self.split_hash))
                logit = logits.gather(0, fold.unsqueeze(0)).squeeze(0)
            else:
                logit = self.model(x).success_logit
        return torch.sigmoid(logit.float())


def score(p: torch.Tensor, labels: torch.Tensor) -> tuple[GateScores, torch.Tensor]:
    """Scores of probabilities ``p`` against 0/1 ``labels``, and the per-record log-loss."""
    value, low, high = auc_with_interval(p, labels)
    eps = 1e-7
    p = p.double().clamp(eps, 1 - eps)
    y = labels.double()
    losses = -(y * p.log() + (1 - y) * (1 - p).log())
    se = (high - low) / (2 * 1.96) if not math.isnan(value) else math.nan
    return GateScores(value, se, float(losses.mean()), len(y)), losses


def compare_on(
    name: str,
    records: Records,
    candidate: ScoredModel,
    served: ScoredModel,
    out_of_fold: bool,
    reference: str | None = None,
) -> GateComparison:
    """Both models on ``records``, and whether the candidate is shown no worse than
    ``served`` (or the earlier model ``reference`` names) by more than the margins."""
    labels = records.labels
    n = len(records)
    positives = int(labels.sum()) if n else 0
    if n < MIN_RECORDS:
        reason = f"{n} record(s): a comparison needs at least {MIN_RECORDS}"
        return GateComparison(name, None, None, passed=None, reason=reason, reference=reference)
    # Under MIN_CLASS of a class the AUC is mostly luck: log-loss alone decides, said so.
    with_auc = min(positives, n - positives) >= MIN_CLASS
    cand_p = candidate.success_probability(records, out_of_fold)
    serv_p = served.success_probability(records, out_of_fold)
    cand, cand_losses = score(cand_p, labels)
    serv, serv_losses = score(serv_p, labels)
    diff = cand_losses - serv_losses
    ll_upper = float(diff.mean()) + Z_ONE_SIDED * float(diff.std() / math.sqrt(n))
    auc_upper = auc_lower = math.nan
    if with_auc:
        served_minus, se = paired_auc_difference(serv_p, cand_p, labels)
        auc_upper = served_minus + Z_ONE_SIDED * se
        auc_lower = served_minus - Z_ONE_SIDED * se
    proof = min(positives, n - positives) >= PROOF_CLASS
    than = f"earlier model {reference}" if reference else "served"
    worse = []
    if with_auc and proof and auc_upper > MARGIN_AUC:
        worse.append(
            f"AUC {cand.auc:.4f} vs {than} {serv.auc:.4f}: up to {auc_upper:.4f} worse "
            f"(95%), margin {MARGIN_AUC}"
        )
    if with_auc and not proof and auc_lower > MARGIN_AUC:
        worse.append(
            f"AUC {cand.auc:.4f} vs {than} {serv.auc:.4f}: at least {auc_lower:.4f} worse "
            f"(95%), margin {MARGIN_AUC} ({positives} successful of {n}: AUC vetoes only)"
        )
    if ll_upper > MARGIN_LOG_LOSS:
        worse.append(
            f"log-loss {cand.log_loss:.4f} vs {than} {serv.log_loss:.4f}: up to "
            f"{ll_upper:.4f} worse (95%), margin {MARGIN_LOG_LOSS}"
        )
    auc_text = f"AUC not compared ({positives} successful of {n})"
    if with_auc:
        auc_text = f"AUC {cand.auc:.4f} vs {serv.auc:.4f}" + (
            "" if proof else f" (vetoes only: {positives} successful of {n})"
        )
    reason = "; ".join(worse) or (
        f"{auc_text}, log-loss {cand.log_loss:.4f} vs {serv.log_loss:.4f}, shown no worse "
        f"than {than} beyond the margins ({n} records)"
    )
    return GateComparison(
        name,
        cand,
        serv,
        MARGIN_AUC if with_auc else math.nan,
        MARGIN_LOG_LOSS,
        not worse,
        reason,
        auc_upper,
        ll_upper,
        reference,
    )


class RecordHashes:
    """The hashes ``held_out_for`` asks of each record, worked out once for both models:
    its id's (was it in the model's pool) and its split's for a seed (was it held out):
    on a million records each pass costs about a second. ``id_hashes``: each id's
    ``record_id_hash``, as the reader keeps them."""

    def __init__(self, trajectory_ids: Sequence[str], id_hashes: np.ndarray) -> None:
        self.trajectory_ids = trajectory_ids
        self.ids = id_hashes
        self._split: dict[tuple[int, int], np.ndarray] = {}

    @classmethod
    def of_columns(cls, columns: PoolColumns) -> RecordHashes:
        """The read's examples', from its columns (what their split drew from)."""
        return cls(*Draw.of_columns(columns))

    def __len__(self) -> int:
        return len(self.trajectory_ids)

    def held_out(
        self, pool_ids: np.ndarray, seed: int, fraction: float, version: int
    ) -> np.ndarray:
        """Outside the pool (``pool_ids``: its id hashes), or in its held-out part (drawn
        for ``seed`` by split hash ``version``, split.SPLIT_HASH)."""
        split = self._split.get((seed, version))
        if split is None:
            draw = Draw(self.trajectory_ids, self.ids)
            split = self._split[(seed, version)] = draw.points(seed, "", version)
        outside = ~held_in(self.ids, pool_ids)
        return outside | (split < fraction)


def comparison_mask(
    hashes: RecordHashes, candidate: ScoredModel, served: ScoredModel
) -> np.ndarray:
    """Which current records (those of ``hashes``) neither model trained on (the module
    docstring's rule), as a bool array."""
    return candidate.held_out_for(hashes) & served.held_out_for(hashes)


def decide(
    comparisons: Sequence[GateComparison], clock: Callable[[], float] | None = None
) -> Verdict:
    """Promote when every set that can decide passes and at least one can."""
    seconds = clock() if clock is not None else 0.0
    deciding = [c for c in comparisons if c.passed is not None]
    if not deciding:
        reasons = "; ".join(f"{c.name}: {c.reason}" for c in comparisons)
        return Verdict(False, False, f"the gate cannot decide ({reasons})", comparisons, seconds)
    failed = [c for c in deciding if not c.passed]
    if failed:
        reason = "; ".join(f"{c.name}: {c.reason}" for c in failed)
        return Verdict(True, False, f"worse than the served model: {reason}", comparisons, seconds)
    reason = "; ".join(f"{c.name}: {c.reason}" for c in deciding)
    return Verdict(True, True, f"no worse than the served model: {reason}", comparisons, seconds)
