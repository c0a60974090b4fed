"""What the lifecycle records write, byte for byte: a pointer made of new records (every
held kind: scores, live figures, comparisons, a pin, a journal's verdicts) and one read
from JSON with keys no record declares, each written as a state file holds it
(``files.json_bytes``). The bytes were taken from the records' codec as it stood before
its held fields were read and written by the records' own methods; a change to the
codec that changes a byte fails here."""

from __future__ import annotations

import hashlib
import json

from genesis_fp16_infrastructure.agent_folder.files import json_bytes
from genesis_fp16_infrastructure.agent_folder.lifecycle_figures import (
    GateComparison,
    LiveFigures,
    LiveReport,
    ScoresOn,
    SelfTest,
    WatchSegment,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    JournalEntry,
    Outcome,
    Pin,
    ServedEntry,
    ServedPointer,
    Verdict,
)

SEGMENT = WatchSegment(name="qa", records=12, difference=0.01, lower=-0.2, upper=0.3,
                       alpha=0.0125, evidence=0.5, records_needed=None,
                       regression=False)  # fmt: skip
COLUMN = LiveFigures(records=40, difference=0.05, lower=-0.1, upper=0.2, margin=0.01,
                     alpha=0.025, regression=False, served_loss=0.41234567,
                     previous_loss=0.4, segments=(SEGMENT,))  # fmt: skip
LIVE = LiveReport(served="m2", against="m1", records=40, new_records=10, alpha=0.05,
                  regression=False, updated_at="2026-11-30T00:00:00Z",
                  metrics={"loss": COLUMN},
                  self_test=SelfTest(replays=200, records=40, false_rollbacks=1,
                                    rate=0.005, lower=0.0001, upper=0.0276))  # fmt: skip
SCORES = ScoresOn(name="held_out", losses={"loss": 0.30000001}, records=80,
                  reported={"auc": 0.9})  # fmt: skip
COMPARISON = GateComparison(name="held_out", passed=True, reason="no worse", segment="qa",
                            finding="no_worse", metric="loss", margin=0.0123456789)  # fmt: skip
VERDICT = Verdict(outcome=Outcome.PROMOTED, reason="gate", candidate=SCORES, served=SCORES,
                  served_id="m1", checkpoint="candidates/c2/ckpt-1.pt", journal_seq=3,
                  decided_at="2026-11-30T00:00:01Z", decided_at_s=1.5,
                  comparisons=(COMPARISON, COMPARISON), live=LIVE)  # fmt: skip
ROLLED = Verdict(outcome=Outcome.ROLLED_BACK, reason="live_regression", live=LIVE,
                 gate_outcome=Outcome.PROMOTED, detail="loss worse")  # fmt: skip


def _pointer() -> ServedPointer:
    served = ServedEntry(id="m2", checkpoint="candidates/c2/ckpt-1.pt", records=80,
                         scores=SCORES, live=LIVE, how="gate")  # fmt: skip
    before = ServedEntry(id="m1", checkpoint="candidates/c1/ckpt-1.pt", scores=SCORES)
    pin = Pin(by="model pin", at="2026-11-30T00:00:02Z")
    journal = [
        JournalEntry(seq=2, kind="first", at="t1", at_s=1.0, served="m1"),
        JournalEntry(
            seq=3,
            kind="gate",
            served="m2",
            pinned=pin,
            verdicts={"c2": VERDICT, "c1": ROLLED},
            dropped=["m0", None],
            reason="why",
        ),
    ]
    return ServedPointer(served, [before], pin, 3, journal)


def _digest(data: object) -> str:
    return hashlib.sha256(json_bytes(data)).hexdigest()


def test_new_records_write_the_same_bytes() -> None:
    """A pointer of records given their values (none read) writes the bytes it wrote."""
    pointer = _pointer()
    assert _digest(pointer.to_json()) == POINTER_SHA256
    assert _digest(VERDICT.to_json()) == VERDICT_SHA256
    assert _digest(ROLLED.to_json()) == ROLLED_SHA256


def test_records_read_write_back_what_they_read_byte_for_byte() -> None:
    """A pointer read from JSON that carries keys no record declares (at every level, in
    held figures too) writes back the same bytes; so does one read from its own JSON."""
    data = json.loads(json_bytes(_pointer().to_json()))
    data["from_newer"] = {"x": 1}
    data["served"]["extra_key"] = [1, 2]
    data["served"]["scores"]["newer_figure"] = 7
    data["journal"][1]["verdicts"]["c2"]["comparisons"][0]["newer"] = "kept"
    data["journal"][1]["verdicts"]["c1"]["live"]["newer"] = True
    data["history"][0]["scores"] = {"losses": "a hand's edit"}
    read = ServedPointer.from_json(json.loads(json.dumps(data)))
    written = read.to_json()
    assert written.pop("from_newer", None) is None  # the pointer itself keeps no extra key
    del data["from_newer"]
    assert json_bytes(written) == json_bytes(data)
    again = ServedPointer.from_json(json.loads(json_bytes(_pointer().to_json())))
    assert json_bytes(again.to_json()) == json_bytes(_pointer().to_json())


POINTER_SHA256 = "c19b5d6601d8444394c6f8d146acbd973f6aa859172af027dada8b3099d5c217"
VERDICT_SHA256 = "1f2332ce6567f66ada991928012cd73f9f26070ae347c7c9776c70e95c10604f"
ROLLED_SHA256 = "127c894eb0c70769fdefd3900ef5ae4cfe0bac2a42d774e430cc7e2069ec917e"
