"""The candidates' folder (agent_folder/candidates.py): listed oldest first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.agent_folder import candidates


def test_candidates_made_in_one_second_are_listed_in_the_order_they_were_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two candidates made within one second (their names and metas carry the same
    second) are listed oldest first, not in the order of their data digests: a fast
    run after a fast run is the newest, whatever its digest."""
    second = time.gmtime()
    monkeypatch.setattr(candidates.time, "gmtime", lambda *_: second)
    monkeypatch.setattr(candidates, "utc_now", lambda: "2026-11-27T19:36:17Z")
    first = candidates.new_candidate(tmp_path, {"fingerprint": "f" * 64})
    time.sleep(0.01)  # a file system's timestamps are at least this fine
    then = candidates.new_candidate(tmp_path, {"fingerprint": "0" * 64})
    assert then.name < first.name  # the digests alone would list them the other way
    assert candidates.list_candidates(tmp_path) == [first, then]
