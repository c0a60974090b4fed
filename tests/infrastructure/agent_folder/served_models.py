"""Candidates and the models the gate served, as the lifecycle tests build a folder:
shared by the transaction's tests and the kill tests."""

from __future__ import annotations

from pathlib import Path

from genesis_fp16_infrastructure.agent_folder import candidates, transitions
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Verdict

CHECKPOINT = "ckpt-0000000005.pt"


def trained(ck: Path, digest: str) -> Path:
    """A new candidate of ``ck`` trained on data ``digest``, with one checkpoint."""
    path = candidates.new_candidate(ck, {"fingerprint": digest, "records": 10})
    (path / CHECKPOINT).write_bytes(b"weights " + digest.encode())
    return path


def gate_serve(ck: Path, served: Path, unless_pinned: bool = False) -> None:
    """Serve the candidate ``served`` as the gate does (its verdict carried by the
    pointer); ``unless_pinned``: as the gate asks, a pin holds it (it must not here)."""
    checkpoint = served / CHECKPOINT
    verdict = {"outcome": "promoted", "reason": "better", "checkpoint": checkpoint.name}
    entry = candidates.candidate_entry(ck, served, checkpoint, Verdict.from_json(verdict))
    assert transitions.serve(ck, entry, "gate", unless_pinned=unless_pinned, verdict=verdict)
