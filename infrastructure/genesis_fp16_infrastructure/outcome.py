"""The words a verdict, a run and a statistical finding end in, spelled once.

Every product file names an outcome by its member here, never by its string: a verdict's
``outcome`` (the gate's and the live watch's), a run's (``TrainResult.outcome``, the
daemon's metric label) and a non-inferiority test's ``finding``. Both enums are ``str``
valued (``StrEnum``): a member *is* its string, so the JSON on disk, the metric labels
and the text a user reads are the words they always were, and a verdict read back from
an older folder compares equal to the member without conversion::

    >>> Outcome.ROLLED_BACK == "rolled_back", f"{Outcome.HELD}", Outcome("promoted")
    (True, 'held', <Outcome.PROMOTED: 'promoted'>)
    >>> import json; json.dumps({"outcome": Outcome.INCONCLUSIVE})
    '{"outcome": "inconclusive"}'

``benchmarks/design_counts.py`` counts the product files that spell one of these words
(tests/test_design_counts.py bounds it to this one).
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What became of a candidate (the gate's verdict, a rollback) or of a run."""

    # A candidate's verdict (verdict.json, the journal's ``verdicts``, GateReport.outcome).
    PROMOTED = "promoted"  # served: no worse than the model served before
    REJECTED = "rejected"  # shown worse; also a run that trained a rejected candidate
    INCONCLUSIVE = "inconclusive"  # neither shown: kept, judged again as records arrive
    UNDECIDED = "undecided"  # not judged (no scores, a refusal); never served
    HELD = "held"  # no worse, but the operator's pin keeps the served model
    ROLLED_BACK = "rolled_back"  # served, then replaced by the model served before it
    # A run's (TrainResult.outcome, the daemon's ``outcome`` label) beside REJECTED.
    SUCCESS = "success"
    FAILED = "failed"  # its steps learned nothing: TrainResult.failure says why
    STOPPED = "stopped"  # asked to stop before its end
    UP_TO_DATE = "up_to_date"  # nothing new to learn: no candidate trained


class Finding(StrEnum):
    """What one non-inferiority test showed (judging.noninferiority): the candidate
    within the margin, beyond it, or neither."""

    NO_WORSE = "no_worse"
    WORSE = "worse"
    INCONCLUSIVE = "inconclusive"  # neither yet: a verdict is then ``inconclusive``
