"""``CheckpointsFolder``: the face of one checkpoints folder's served models, an agent's
(``AgentFolder.checkpoints``) or any other (``train --checkpoint-dir``'s, a test's): the
pointer and where it was set aside, the candidates, each one's verdict, meta and newest
checkpoint, a checkpoint's summary, and the pruning the daemon does after a run, each
read or done by the served-model lifecycle's own functions (``agent_folder``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder import candidates, files, pointer, repair
from genesis_fp16_infrastructure.agent_folder import layout as L
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    CandidateMeta,
    ServedEntry,
    ServedPointer,
    Verdict,
)
from genesis_fp16_infrastructure.training.checkpoint_files import read_summary


@dataclass(frozen=True)
class CheckpointsFolder:
    """The served models of the checkpoints folder ``path``, read with the lifecycle's
    own readers: the pointer and where it was set aside, the candidates, each one's
    verdict and meta, and the pruning the daemon does after a run.

    >>> models = CheckpointsFolder(Path("state/agents/my_agent/checkpoints"))
    >>> models.holds_models()  # a pointer, one set aside, or a candidate
    False
    """

    path: Path

    @property
    def pointer_path(self) -> Path:
        return L.SERVED_POINTER.at(self.path)

    @property
    def aside_path(self) -> Path:
        """Where the pointer was last set aside (``served.json.unusable``: never)."""
        return pointer.aside_path(self.path)

    @property
    def candidates_dir(self) -> Path:
        return pointer.candidates_dir(self.path)

    def disk_bytes(self) -> int:
        """The bytes of every file here (``files.folder_bytes``: the disk use gauge)."""
        return files.folder_bytes(self.path)

    def has_checkpoint(self) -> bool:
        """A checkpoint to resume from: the folder's own, or a served one."""
        return bool(L.list_checkpoints(self.path)) or self.serves_checkpoints()

    def serves_checkpoints(self) -> bool:
        """A pointer, or a candidate's ``ckpt-*.pt`` (a gate's folder holds checkpoints)."""
        return self.pointer_path.exists() or any(self.candidates_dir.rglob("ckpt-*.pt"))

    def holds_models(self) -> bool:
        """Whether the folder has a promotion gate's models: a pointer, one set aside,
        or a candidate (an agent without a gate serves its newest checkpoint)."""
        return any(p.exists() for p in (self.candidates_dir, self.pointer_path, self.aside_path))

    def repair_hint(self) -> str:
        """The commands that repair an unusable pointer, naming the agent."""
        return pointer.repair_hint(self.path)

    def pointer_json(self) -> Any:
        """The pointer's JSON as the file holds it, read within its bound; None: no pointer.
        A look: an unusable file raises ``UnusableStateFile`` and stays where it is."""
        return files.read_json(self.pointer_path, L.SERVED_POINTER)

    def candidates(self) -> list[Path]:
        """The kept candidates' folders, oldest first."""
        return candidates.list_candidates(self.path)

    @staticmethod
    def verdict(candidate: Path) -> Verdict:
        """``candidate``'s verdict; ``Verdict()`` while it has none (training)."""
        return candidates.read_verdict(candidate)

    @staticmethod
    def meta(candidate: Path) -> CandidateMeta:
        return candidates.read_meta(candidate)

    @staticmethod
    def summary(checkpoint: Path) -> dict[str, Any] | None:
        """``checkpoint``'s summary file (step, precision, ...), its own bytes unread; None:
        none, unreadable, or not of the bytes its digest names now (``read_summary``)."""
        return read_summary(checkpoint)

    def newest_checkpoint(self, candidate: Path | None = None) -> Path | None:
        """The newest checkpoint file of ``candidate``, or of the folder itself (an agent
        without a gate)."""
        return candidates.newest_checkpoint(self.path if candidate is None else candidate)

    def served_entry(self, candidate: Path) -> ServedEntry | None:
        """The pointer entry that serves ``candidate`` (None: it holds no checkpoint)."""
        return candidates.served_entry(self.path, candidate)

    def served_checkpoint(self) -> Path | None:
        """The checkpoint the pointer names (None: no pointer); ServedPointerError when
        it is gone."""
        return pointer.served_checkpoint(self.path)

    def repairable_pointer(self) -> ServedPointer | None:
        """The pointer a repair starts from (``agent_folder.repair.repairable_pointer``)."""
        return repair.repairable_pointer(self.path)

    def prune(
        self, keep_served: int, rejected_days: float, recover_first: bool = False
    ) -> tuple[list[Path], ServedPointer | None]:
        """Bound the history, and the pointer as it stands after
        (``agent_folder.candidates.prune``)."""
        return candidates.prune(self.path, keep_served, rejected_days, recover_first)
