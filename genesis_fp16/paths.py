"""Where each agent's data, checkpoints and state live inside the state folder.

<state_dir>/agents/<agent>/
    data/                  generated sample data (when no data path is configured)
    checkpoints/           atomic checkpoints, newest kept last
    quarantine.jsonl       malformed records skipped during reads, with reasons
    precision_state.json   the precision guard's memory (demotions)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infrastructure.atomic import write_atomic
from infrastructure.plugin_api import AgentPlugin

SAMPLE_DATA_COUNT = 20_000
SAMPLE_DATA_SEED = 0


@dataclass(frozen=True)
class AgentPaths:
    """The folders and files of one agent under the daemon's state folder."""

    root: Path

    @classmethod
    def for_agent(cls, state_dir: Path, agent: str) -> AgentPaths:
        return cls(Path(state_dir) / "agents" / agent)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / "checkpoints"

    @property
    def quarantine_path(self) -> Path:
        return self.root / "quarantine.jsonl"

    @property
    def precision_state_path(self) -> Path:
        return self.root / "precision_state.json"

    @property
    def calibration_path(self) -> Path:
        """Where a measured ``auto`` keeps its timings (``precision show`` prints them)."""
        return self.root / "precision_calibration.json"


def ensure_sample_data(
    plugin: AgentPlugin,
    paths: AgentPaths,
    count: int = SAMPLE_DATA_COUNT,
    seed: int = SAMPLE_DATA_SEED,
) -> Path:
    """Return the agent's generated sample dataset, generating it on first use.

    A marker file is written after the plugin returns, so a generation cut short by a
    signal is redone rather than half-used.
    """
    marker = paths.data_dir / ".generated"
    if marker.exists():
        return Path(marker.read_text().strip())
    paths.data_dir.mkdir(parents=True, exist_ok=True)
    data_path = plugin.generate_sample_data(paths.data_dir, count, seed)
    write_atomic(marker, lambda handle: handle.write(str(data_path).encode()))
    return data_path
