"""The gate's rule: the candidate must be shown no worse than the served model by more than
the margin (paired bounds), and is held to the best model served before."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from genesis_fp16_infrastructure.data.pool_columns import Coded
from genesis_fp16_infrastructure.recipes.retrain import gate, judge_sets
from genesis_fp16_infrastructure.world_model.metrics import auc, paired_auc_difference


@dataclass
class _Fixed:
    """A stand-in for a ScoredModel: fixed probabilities per record, a fixed held-out mask."""

    p: torch.Tensor
    held_out: np.ndarray | None = None

    def success_probability(self, records: gate.Records, out_of_fold: bool) -> torch.Tensor:
        return self.p[torch.as_tensor([int(i) for i in records.ids])]

    def held_out_for(self, hashes: gate.RecordHashes) -> np.ndarray:
        assert self.held_out is not None
        return self.held_out


def _records(labels: torch.Tensor) -> gate.Records:
    n = len(labels)
    return gate.Records(
        [str(i) for i in range(n)],
        labels.float(),
        None,  # type: ignore[arg-type]  # the stand-ins never encode
        torch.zeros(n, 1),
        np.arange(n, dtype=np.int64),
    )


def _logit_model(seed: int, n: int, strength: float) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    signal = torch.randn(n, generator=generator)
    labels = (torch.rand(n, generator=generator) < torch.sigmoid(1.6 * signal)).float()
    return labels, torch.sigmoid(strength * signal)


def test_a_candidate_worse_by_less_than_two_standard_errors_is_not_promoted() -> None:
    """A candidate worse on both scores (AUC by 0.011, log-loss by 0.013 on 200 records)
    but within the old rule's 2 s.e. on each is not promoted: its loss cannot be bounded
    below the margins; nor is it shown worse beyond them, so it is inconclusive (issue 62)."""
    labels, served_p = _logit_model(0, 200, 1.6)
    noise = torch.randn(200, generator=torch.Generator().manual_seed(2))
    candidate_p = torch.sigmoid(torch.logit(served_p) + 0.3 * noise)
    records = _records(labels)
    cmp = gate.compare_on("held_out", records, _Fixed(candidate_p), _Fixed(served_p), True)  # type: ignore[arg-type]
    assert cmp.candidate is not None and cmp.served is not None
    auc_loss = cmp.served.auc - cmp.candidate.auc
    ll_loss = cmp.candidate.log_loss - cmp.served.log_loss
    assert 0.005 < auc_loss < 2 * cmp.served.auc_se  # the old rule let this AUC through
    paired_se = (cmp.log_loss_worse_upper - ll_loss) / gate.Z_ONE_SIDED
    assert 0.005 < ll_loss < 2 * paired_se  # and this log-loss
    assert cmp.passed is None and cmp.finding == "inconclusive", cmp.reason
    assert "(95%), margin" in cmp.reason and "too few records to tell" in cmp.reason
    verdict = gate.decide([cmp])
    assert verdict.outcome == "inconclusive" and not verdict.promote


def test_an_equal_or_better_candidate_on_enough_records_passes() -> None:
    """The same model, and a sharper one, pass; the bounds are recorded."""
    labels, served_p = _logit_model(2, 2000, 1.2)
    records = _records(labels)
    same = gate.compare_on("held_out", records, _Fixed(served_p), _Fixed(served_p), True)  # type: ignore[arg-type]
    assert same.passed is True and same.log_loss_worse_upper == 0.0
    better = torch.sigmoid(torch.logit(served_p) * 1.6 / 1.2)
    cmp = gate.compare_on("held_out", records, _Fixed(better), _Fixed(served_p), True)  # type: ignore[arg-type]
    assert cmp.passed is True, cmp.reason
    assert cmp.log_loss_worse_upper < 0 and cmp.to_json()["delta_auc"] == gate.MARGIN_AUC


def test_a_small_set_cannot_prove_a_worse_candidate_no_worse() -> None:
    """On 80 records a candidate slightly worse by the point estimate is not promoted:
    the burden of proof is the candidate's; inconclusive, with the records it needs."""
    labels, served_p = _logit_model(3, 80, 1.6)
    noise = torch.randn(80, generator=torch.Generator().manual_seed(4))
    candidate_p = torch.sigmoid(torch.logit(served_p) + 0.3 * noise)
    cmp = gate.compare_on("held_out", _records(labels), _Fixed(candidate_p), _Fixed(served_p), True)  # type: ignore[arg-type]
    assert cmp.passed is None and cmp.finding == "inconclusive", cmp.reason
    assert cmp.records_needed is not None and cmp.records_needed > 80


def test_delong_matches_the_auc_difference_and_a_bootstrap() -> None:
    """DeLong's paired difference is the AUCs' difference, and its s.e. is within 20% of a
    bootstrap's on 600 records."""
    labels, first = _logit_model(5, 600, 1.6)
    second = torch.sigmoid(
        torch.logit(first) + 0.6 * torch.randn(600, generator=torch.Generator().manual_seed(6))
    )
    diff, se = paired_auc_difference(first, second, labels)
    assert math.isclose(diff, auc(first, labels) - auc(second, labels), abs_tol=1e-12)
    generator = torch.Generator().manual_seed(7)
    boots = []
    for _ in range(300):
        idx = torch.randint(0, 600, (600,), generator=generator)
        boots.append(auc(first[idx], labels[idx]) - auc(second[idx], labels[idx]))
    assert abs(se / float(torch.tensor(boots).std()) - 1) < 0.2


def test_the_best_earlier_model_is_the_one_to_beat(monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier model with a lower log-loss than the served one on the shared records is
    picked; when the served one is best, none is."""
    # Records.of_columns builds the encoder's inputs; the stand-ins never read them.
    monkeypatch.setattr(gate.Categorical, "of_rows", classmethod(lambda cls, c, r: None))
    labels, good = _logit_model(8, 400, 1.6)
    worse = torch.sigmoid(torch.logit(good) * 0.5)
    everyone = np.ones(400, dtype=np.bool_)
    hashes = gate.RecordHashes([str(i) for i in range(400)], np.arange(400, dtype=np.int64))
    columns = _Columns(labels)
    earlier = [("older", _Fixed(good, everyone))]
    found = judge_sets.best_earlier(
        columns, hashes, everyone, _Fixed(worse, everyone), earlier, torch.zeros(400, 1)
    )  # type: ignore[arg-type]
    assert found is not None and found[0] == "older" and len(found[2]) == 400
    none = judge_sets.best_earlier(
        columns,
        hashes,
        everyone,
        _Fixed(good, everyone),
        [("older", _Fixed(worse, everyone))],
        torch.zeros(400, 1),
    )  # type: ignore[arg-type]
    assert none is None


class _Columns:
    """Just what Records.of_columns reads, for records 0..n-1."""

    def __init__(self, labels: torch.Tensor) -> None:
        n = len(labels)
        self.labelled = np.arange(n)
        self.example_ids = [str(i) for i in range(n)]
        self.success = labels.numpy().astype(bool)
        self.id_hash = np.arange(n, dtype=np.int64)
        self.agent = Coded.of(["se_darwin"] * n)


def test_with_few_successes_the_log_loss_carries_the_proof() -> None:
    """With 35 successes in 400 records the AUC cannot be bounded within its margin: a
    better-calibrated retrain passes on its log-loss, said so, while a model reliably
    worse on AUC is still vetoed."""
    generator = torch.Generator().manual_seed(9)
    signal = torch.randn(400, generator=generator)
    labels = (torch.rand(400, generator=generator) < torch.sigmoid(2 * signal - 3.5)).float()
    assert gate.MIN_CLASS <= int(labels.sum()) < gate.PROOF_CLASS
    served_p = torch.sigmoid(0.7 * signal - 2.0)  # ranks well, calibrated badly
    jitter = 0.8 * torch.randn(400, generator=generator)  # a retrain: not the same ranks
    retrain = torch.sigmoid(2 * signal - 3.5 + jitter)
    records = _records(labels)
    kept = gate.compare_on("held_out", records, _Fixed(retrain), _Fixed(served_p), True)  # type: ignore[arg-type]
    assert kept.passed is True and "vetoes only" in kept.reason
    assert kept.auc_worse_upper > gate.MARGIN_AUC  # the proof the AUC alone could not give
    blind = torch.sigmoid(torch.randn(400, generator=generator) - 3.0)
    vetoed = gate.compare_on("held_out", records, _Fixed(blind), _Fixed(served_p), True)  # type: ignore[arg-type]
    assert vetoed.passed is False and "vetoes only" in vetoed.reason
    assert vetoed.auc_worse_lower is not None and vetoed.auc_worse_lower > gate.MARGIN_AUC
