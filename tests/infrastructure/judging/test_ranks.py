"""A judged run under torchrun: rank 0's word, as every other rank acts on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.judging import ranks


def _heard(monkeypatch: pytest.MonkeyPatch, word: Any) -> list[Any]:
    """The broadcast replaced: what rank 0 sends is kept; another rank receives ``word``."""
    sent: list[Any] = []

    def broadcast(told: Any) -> Any:
        sent.append(told)
        return word if told is None else told

    monkeypatch.setattr(ranks, "_broadcast", broadcast)
    return sent


def test_rank_zero_judges_and_tells_and_the_others_train_where_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 runs the judged run, which tells the others; another rank trains in the
    folder rank 0 named, finishing as it said, and judges nothing."""
    request = TrainRequest(
        agent="a", precision_reason="t", state_dir=tmp_path, checkpoint_dir=tmp_path
    )
    sent = _heard(monkeypatch, ("train", (str(tmp_path / "c1"), True)))
    trained: list[TrainRequest] = []

    def judge(tell: ranks.Tell) -> Any:
        tell(("train", (str(tmp_path / "c1"), True)))
        return "judged"

    assert ranks.ranked(request, 0, judge, trained.append) == "judged"
    assert sent == [("train", (str(tmp_path / "c1"), True))] and trained == []
    ranks.ranked(request, 1, judge, trained.append)
    assert trained[0].checkpoint_dir == tmp_path / "c1" and trained[0].finishes is True


def test_a_refusal_on_rank_zero_is_said_to_every_rank_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 refused before telling: the others hear why, and refuse in one line."""
    request = TrainRequest(
        agent="a", precision_reason="t", state_dir=tmp_path, checkpoint_dir=tmp_path
    )
    sent = _heard(monkeypatch, ("refused", "TrainRequestError: no data"))

    def judge(tell: ranks.Tell) -> Any:
        raise TrainRequestError("no data")

    with pytest.raises(TrainRequestError):
        ranks.ranked(request, 0, judge, lambda r: None)
    assert sent == [("refused", "TrainRequestError: no data")]
    with pytest.raises(TrainRequestError, match="rank 0 refused the run: TrainRequestError"):
        ranks.ranked(request, 1, judge, lambda r: None)
