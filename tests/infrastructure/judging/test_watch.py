"""The watch's figures over every loss column and its one decision (judging.watch), on a
real pointer and a real store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from genesis_fp16_infrastructure.agent_folder import pointer, transitions
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedEntry
from genesis_fp16_infrastructure.contract.reports import LiveReport
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.judging.watch import ALPHA, _detail, decide_live, figures_of

COLUMN = {"records": 40, "difference": 0.0, "lower": -0.1, "upper": 0.1, "margin": 0.01,
          "alpha": 0.05, "regression": False}  # fmt: skip
FIGURES: dict[str, Any] = {"records": 40, "new_records": 40, "against": "a", "alpha": 0.05,
                           "primary": "loss", "metrics": {"loss": COLUMN},
                           "regression": False}  # fmt: skip


def test_recording_the_figures_keeps_the_pointers_journal(tmp_path: Path) -> None:
    """A watch that finds no regression writes its figures into the served entry and leaves
    the journal the daemon counts transitions from as it was."""
    transitions.serve(tmp_path, ServedEntry(id="a", checkpoint="a/ckpt.pt"), "first")
    transitions.serve(tmp_path, ServedEntry(id="b", checkpoint="b/ckpt.pt"), "gate")
    before = pointer.read_pointer(tmp_path)
    assert before is not None and before.sequence >= 2 and before.journal

    report = decide_live(tmp_path, "agent_a", "b", dict(FIGURES))

    after = pointer.read_pointer(tmp_path)
    assert isinstance(report, LiveReport) and report.served == "b"
    assert after is not None and report.rolled_back is False and report.held is None
    assert after.served.live is not None and after.served.live.records == 40
    assert after.served.live.watched.lower == -0.1  # the primary's
    assert after.served.live == report  # what the watch did is not kept: it did nothing
    assert (after.sequence, after.journal) == (before.sequence, before.journal)


class _Plugin:
    loss_span = 4.6
    judging_margin = 0.01


def test_each_segment_is_tested_apart_and_kept_with_its_records(tmp_path: Path) -> None:
    """Records of two agents, one much worse under the served model: the figures test
    each segment apart (the worse one's lower bound past the margin) beside the overall
    test, and the watch store keeps each record's segment across a write and a read."""
    rng = np.random.default_rng(0)
    names = np.array(["coder", "qa"] * 300)
    previous = rng.uniform(0.2, 0.4, size=600)
    served = previous + np.where(names == "qa", 0.5, 0.0)
    path = tmp_path / "judged-live-x.npz"
    kept = {
        "ids": np.arange(600, dtype=np.uint64),
        "served/loss": served,
        "previous/loss": previous,
    }
    stores.write_watch(path, {**kept, "segments": names})
    again = stores.read_watch(path, "loss")
    assert again["segments"].tolist() == names.tolist()
    figures = figures_of(again, 4.6, _Plugin(), ["loss"])
    by_name = {s.name: s for s in figures.metrics["loss"].segments or ()}
    assert set(by_name) == {"coder", "qa"} and figures.regression
    assert by_name["qa"].regression and not by_name["coder"].regression
    assert by_name["qa"].lower > 0.01 and by_name["qa"].records == 300


def test_a_store_written_before_columns_or_segments_reads_as_the_primary_column(
    tmp_path: Path,
) -> None:
    """A watch store of one column (``served``, ``previous``: the primary watched then)
    without the segments array reads as the primary column's records, unsegmented, and
    the figures test them as one segment."""
    path = tmp_path / "judged-live-x.npz"
    old = {"ids": np.arange(50, dtype=np.uint64), "served": np.ones(50), "previous": np.ones(50)}
    stores.write_watch(path, old)
    kept = stores.read_watch(path, "log_loss")
    assert kept["segments"].tolist() == [""] * 50 and set(kept) == {
        "ids", "segments", "served/log_loss", "previous/log_loss"}  # fmt: skip
    column = figures_of(kept, 4.6, _Plugin(), ["log_loss"]).metrics["log_loss"]
    assert column.segments is None and column.records == 50


def test_each_column_is_watched_with_its_own_margin() -> None:
    """A plugin whose margins are a map by loss column: each column's test holds that
    column's margin (0.01, 0.005), a column it does not name the 5% default (0.03 here)."""

    class ByColumn:
        loss_span = 4.6
        judging_margin: ClassVar = {"log_loss": 0.01, "brier": 0.005}

    same = np.full(40, 0.6)
    kept = {"ids": np.arange(40), **{f"{s}/{m}": same for s in ("served", "previous")
                                     for m in ("log_loss", "brier", "loss")}}  # fmt: skip
    metrics = figures_of(kept, 4.6, ByColumn(), ["log_loss", "brier", "loss"]).metrics
    assert [metrics[m].margin for m in ("log_loss", "brier")] == [0.01, 0.005]
    assert metrics["loss"].margin == pytest.approx(0.03)


def _two_columns(rng: np.random.Generator, count: int, worse: float) -> dict[str, np.ndarray]:
    """``count`` records of two correlated loss columns, the served model as good as its
    predecessor on ``a`` and worse by ``worse`` on ``b``."""
    previous = rng.uniform(0.1, 0.9, size=count)
    noise = rng.normal(0.0, 0.1, size=count)
    return {
        "ids": np.arange(count, dtype=np.uint64),
        "served/a": np.clip(previous + noise, 0, 1),
        "previous/a": previous,
        "served/b": np.clip(previous**2 + noise / 2 + worse, 0, 1),
        "previous/b": previous**2,
    }


def test_a_regression_in_the_second_column_alone_is_found_and_named() -> None:
    """The served model equal on the primary column and worse by 0.1 on the second: the
    watch finds a regression, in ``b`` alone, each column tested at ALPHA / 2, and the
    rollback's reason names ``b`` and not ``a``."""
    kept = _two_columns(np.random.default_rng(1), 600, 0.1)
    figures = figures_of(kept, 1.0, _Plugin(), ["a", "b"])
    metrics = figures.metrics
    assert figures.regression and metrics["b"].regression and not metrics["a"].regression
    assert metrics["a"].alpha == metrics["b"].alpha == ALPHA / 2
    assert metrics["b"].lower > 0.01 and figures.primary == "a"
    report = replace(figures, served="m2", against="m1", new_records=9)
    assert report.regressed == ("b",) and report.watched == report.metrics["a"]
    said = _detail(report)
    assert said.startswith("live regression: b ") and " a " not in said


def test_clean_records_on_two_columns_do_not_roll_back_and_the_self_test_holds() -> None:
    """A/A on two columns, each at the margin's edge after the self-test's centring: no
    regression on 20 clean watches of 600 records, and the family's self-test (both
    columns replayed together) keeps its false-rollback rate at most ALPHA."""
    rng = np.random.default_rng(2)
    for _ in range(20):
        figures = figures_of(_two_columns(rng, 600, 0.0), 1.0, _Plugin(), ["a", "b"])
        assert not figures.regression, figures.metrics
    test = figures.self_test
    assert test is not None and test.records == 600 and test.replays == 200 and test.rate <= ALPHA
