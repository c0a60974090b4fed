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
large enough to bound its loss below the margin; a small set proves little, so a
candidate merely not shown worse is not promoted. Issue 62: each set, and each Genesis
agent of the held-out set that the served model knew (:func:`known_segments`), is a
question with three answers, settled together by :func:`decide`: no worse (the bound
above), worse (its lower bound past the margin, Holm over every question: ``rejected``)
or neither (``inconclusive``: kept, judged again as records arrive, never called
worse); docs/judging.md states the rule and its reasons. With under ``PROOF_CLASS`` (50)
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
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
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
from genesis_fp16_infrastructure.judging.noninferiority import Z_95, Bound, holm_worse
from genesis_fp16_infrastructure.outcome import Outcome
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
Z_ONE_SIDED = Z_95  # 95% one-sided: the upper bound of how much worse
# A segment (se_darwin: the Genesis agent) the served model trained on is judged on its
# own when the comparison set holds this many of its records (docs/judging.md: at 200
# records a candidate equal to the served model is still inconclusive three times in
# four, so fewer would mostly block). Fewer count in the whole set only.
SEGMENT_MIN_RECORDS = 100


@dataclass(frozen=True)
class Verdict:
    """The gate's decision: ``promote`` only when ``decided``; ``reason`` in one line."""

    decided: bool
    promote: bool
    reason: str
    comparisons: Sequence[GateComparison] = field(default_factory=tuple)
    seconds: float = 0.0
    # Neither shown no worse nor worse (issue 62): not served, kept, judged again as
    # records arrive; ``needed``: the records its undecided sets would need (None:
    # more records alone would not show it at the observed difference).
    inconclusive: bool = False
    needed: int | None = None

    @property
    def outcome(self) -> Literal["promoted", "rejected", "inconclusive", "undecided"]:
        if not self.decided:
            return "undecided"
        if self.inconclusive:
            return "inconclusive"
        return "promoted" if self.promote else "rejected"

    def report(self, **fields: Any) -> GateReport:
        """The verdict as the run reports it, with ``fields`` (the precision, the model
        held against, the checkpoint) and the first set's scores of each model."""
        report = GateReport(
            Outcome(self.outcome),
            self.reason,
            tuple(self.comparisons),
            self.seconds,
            records_needed=self.needed,
        )
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
    segments: Sequence[str] = ()  # each record's segment: the Genesis agent that wrote it

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
            columns.agent.take(rows),
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
            [a.agent for a in attempts],
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
    """Both models on the whole of ``records`` (:func:`compare_segments`' first)."""
    return compare_segments(name, records, candidate, served, out_of_fold, (), reference)[0]


def compare_segments(
    name: str,
    records: Records,
    candidate: ScoredModel,
    served: ScoredModel,
    out_of_fold: bool,
    known: Collection[str],
    reference: str | None = None,
) -> list[GateComparison]:
    """Both models on ``records``: the whole set's comparison, then one per segment of
    ``known`` (the segments the served model trained on) with at least
    ``SEGMENT_MIN_RECORDS`` records here, each with its bounds and its own finding
    (:func:`decide` settles every finding together, Holm over all of them); ``reference``:
    the earlier model compared with, when not the served one."""
    labels = records.labels
    n = len(records)
    if n < MIN_RECORDS:
        reason = f"{n} record(s): a comparison needs at least {MIN_RECORDS}"
        return [GateComparison(name, None, None, passed=None, reason=reason, reference=reference)]
    cand_p = candidate.success_probability(records, out_of_fold)
    serv_p = served.success_probability(records, out_of_fold)
    cand, cand_losses = score(cand_p, labels)
    serv, serv_losses = score(serv_p, labels)
    diff = (cand_losses - serv_losses).numpy()
    log_loss = Bound.of(name, diff, MARGIN_LOG_LOSS)
    positives = int(labels.sum())
    auc = None
    if min(positives, n - positives) >= MIN_CLASS:  # under it the AUC is mostly luck
        served_minus, se = paired_auc_difference(serv_p, cand_p, labels)
        proof = min(positives, n - positives) >= PROOF_CLASS
        auc = Bound(name, n, served_minus, se, MARGIN_AUC, required=proof)
    whole = _settled(
        GateComparison(name, cand, serv, reference=reference), log_loss, auc, positives
    )
    found = [whole]
    segments = np.asarray(records.segments, dtype=object)
    if len(segments) != n or len(set(segments.tolist())) < 2:
        return found  # one segment: its question is the whole set's
    for segment in sorted(known):
        picked = segments == segment
        if int(picked.sum()) < SEGMENT_MIN_RECORDS:
            continue  # too few to judge alone: it counts in the whole set only
        count = int(picked.sum())
        mine = GateScores(math.nan, math.nan, float(cand_losses.numpy()[picked].mean()), count)
        theirs = GateScores(math.nan, math.nan, float(serv_losses.numpy()[picked].mean()), count)
        shell = GateComparison(name, mine, theirs, reference=reference, segment=str(segment))
        bound = Bound.of(f"{name}[{segment}]", diff[picked], MARGIN_LOG_LOSS)
        found.append(_settled(shell, bound, None, None))
    return found


def known_segments(columns: PoolColumns, model: ScoredModel) -> set[str]:
    """The segments (Genesis agents) of which ``model``'s training pool held at least
    ``MIN_RECORDS`` of the read's labelled records: those it already knew."""
    if model.pool_ids is None:
        return set()
    rows = columns.labelled
    knew = held_in(columns.id_hash[rows], model.pool_ids)
    counts = Counter(columns.agent.take(rows[knew]))
    return {str(agent) for agent, n in counts.items() if n >= MIN_RECORDS}


def bounds_of(comparison: GateComparison) -> list[Bound]:
    """The questions a comparison asks (its log-loss, and its AUC when compared), from
    its recorded bounds; none for a set too small to decide."""
    found = []
    pairs = (
        (comparison.log_loss_worse_lower, comparison.log_loss_worse_upper, MARGIN_LOG_LOSS, True),
        (comparison.auc_worse_lower, comparison.auc_worse_upper, MARGIN_AUC, None),
    )
    records = comparison.candidate.records if comparison.candidate is not None else 0
    for lower, upper, margin, required in pairs:
        if lower is None or not math.isfinite(upper):
            continue
        mean, se = (upper + lower) / 2, (upper - lower) / (2 * Z_ONE_SIDED)
        needed = required if required is not None else not comparison.auc_vetoes_only
        found.append(Bound(_label(comparison), records, mean, se, margin, needed))
    return found


def _label(comparison: GateComparison) -> str:
    """How a reason names a comparison: its set, and its segment when it has one."""
    segment = f" (segment {comparison.segment})" if comparison.segment is not None else ""
    return f"{comparison.name}{segment}"


def _settled(
    shell: GateComparison, log_loss: Bound, auc: Bound | None, positives: int | None
) -> GateComparison:
    """``shell`` with its bounds, and its finding and reason as its own two questions
    alone would settle them (:func:`decide` settles them again, with every question)."""
    bounds = [log_loss] if auc is None else [log_loss, auc]
    finding, needed = _combined(bounds, holm_worse(bounds))
    assert shell.candidate is not None and shell.served is not None
    return replace(
        shell,
        delta_auc=MARGIN_AUC if auc is not None else math.nan,
        delta_log_loss=MARGIN_LOG_LOSS,
        passed=_PASSED.get(finding),
        reason=f"{_figures(shell, log_loss, auc, positives)}; {_shown(shell, finding)}",
        auc_worse_upper=auc.upper if auc is not None else math.nan,
        log_loss_worse_upper=log_loss.upper,
        finding=finding,
        log_loss_worse_lower=log_loss.lower,
        auc_worse_lower=auc.lower if auc is not None else None,
        auc_vetoes_only=True if auc is not None and not auc.required else None,
        records_needed=needed,
    )


_PASSED = {"no_worse": True, "worse": False}  # inconclusive: passed is None


def _combined(bounds: Sequence[Bound], worse: Sequence[bool]) -> tuple[str, int | None]:
    """One comparison's finding from its questions' (``worse``: Holm's flags), and the
    records it needs when inconclusive (None: more records alone cannot show it at the
    observed mean, or it is not inconclusive). A veto-only AUC never holds it back."""
    findings = {
        b.finding(flag) for b, flag in zip(bounds, worse, strict=True) if b.required or flag
    }
    finding = next(f for f in ("worse", "inconclusive", "no_worse") if f in findings | {"no_worse"})
    if finding != "inconclusive":
        return finding, None
    needed = [b.records_needed() for b in bounds if b.required and b.upper > b.margin]
    if any(n is None for n in needed):
        return finding, None
    return finding, max(n for n in needed if n is not None)


def _figures(
    shell: GateComparison, log_loss: Bound, auc: Bound | None, positives: int | None
) -> str:
    """The comparison's scores and bounds against the margins, in a line."""
    cand, serv = shell.candidate, shell.served
    assert cand is not None and serv is not None
    than = f"earlier model {shell.reference}" if shell.reference else "served"
    where = f" on segment {shell.segment}" if shell.segment is not None else ""
    parts = [
        f"log-loss {cand.log_loss:.4f} vs {than} {serv.log_loss:.4f}{where}: worse by "
        f"{log_loss.lower:+.4f} to {log_loss.upper:+.4f} (95%), margin {MARGIN_LOG_LOSS}"
    ]
    if auc is not None:
        veto = "" if auc.required else f" (vetoes only: {positives} successful of {cand.records})"
        parts.append(
            f"AUC {cand.auc:.4f} vs {serv.auc:.4f}: worse by {auc.lower:+.4f} to "
            f"{auc.upper:+.4f}, margin {MARGIN_AUC}{veto}"
        )
    elif positives is not None:
        parts.append(f"AUC not compared ({positives} successful of {cand.records})")
    return "; ".join(parts)


def _shown(comparison: GateComparison, finding: str) -> str:
    """What a comparison's finding says, in words (the last part of its reason)."""
    than = f"earlier model {comparison.reference}" if comparison.reference else "served"
    records = comparison.candidate.records if comparison.candidate is not None else 0
    return {
        "no_worse": f"shown no worse than {than} beyond the margins",
        "worse": f"shown worse than {than} beyond a margin",
        "inconclusive": "neither shown no worse nor worse: too few records to tell",
    }[finding] + f" ({records} records)"


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
    """Settle every comparison's questions together (module docstring): rejected when
    Holm shows one worse, promoted when every required one is shown no worse, else
    inconclusive; undecided when no set could be compared."""
    seconds = clock() if clock is not None else 0.0
    asked = [(i, b) for i, c in enumerate(comparisons) for b in bounds_of(c)]
    if not asked and all(c.passed is None for c in comparisons):
        reasons = "; ".join(f"{c.name}: {c.reason}" for c in comparisons)
        return Verdict(False, False, f"the gate cannot decide ({reasons})", comparisons, seconds)
    flags = holm_worse([b for _, b in asked])
    settled = []
    for i, c in enumerate(comparisons):
        mine = [(b, flag) for (j, b), flag in zip(asked, flags, strict=True) if j == i]
        if not mine:  # no bounds (too few records, or a record without them): as it says
            found = None if c.passed is None else ("no_worse" if c.passed else "worse")
            settled.append(replace(c, finding=c.finding or found))
            continue
        finding, needed = _combined([b for b, _ in mine], [flag for _, flag in mine])
        figures = c.reason.rsplit("; ", 1)[0]
        settled.append(
            replace(
                c,
                passed=_PASSED.get(finding),
                finding=finding,
                records_needed=needed,
                reason=f"{figures}; {_shown(c, finding)}",
            )
        )
    return _verdict(settled, seconds)


def _verdict(settled: Sequence[GateComparison], seconds: float) -> Verdict:
    """The verdict of comparisons settled together, naming the sets and segments that
    decided it."""

    def named(found: Sequence[GateComparison]) -> str:
        return "; ".join(f"{_label(c)}: {c.reason}" for c in found)

    worse = [c for c in settled if c.finding == "worse"]
    if worse:
        reason = f"worse than the served model: {named(worse)}"
        return Verdict(True, False, reason, settled, seconds)
    open_ = [c for c in settled if c.finding == "inconclusive"]
    if open_:
        needs = [c.records_needed for c in open_]
        need = None if any(n is None for n in needs) else max(n for n in needs if n is not None)
        wants = (
            f"about {need} records in each undecided set would show it at the observed difference"
            if need is not None
            else "more records alone would not show it at the observed difference"
        )
        reason = f"inconclusive, not shown no worse ({wants}): {named(open_)}"
        return Verdict(True, False, reason, settled, seconds, inconclusive=True, needed=need)
    deciding = [c for c in settled if c.passed is not None]
    reason = f"no worse than the served model: {named(deciding)}"
    return Verdict(True, True, reason, settled, seconds)
