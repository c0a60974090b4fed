"""Where each agent's data, checkpoints and state live inside the state folder.

<state_dir>/agents/<agent>/
    data/                  the agent's data when no data path is configured: the generated
                           sample, and, for an agent that reads a folder of pools
                           (``data_folder = True``, se_darwin), every pool a person drops
                           there (default_data_path)
    checkpoints/           atomic checkpoints, newest kept last
    quarantine/            malformed records skipped during reads, with reasons: a file
                           per run (<UTC time>.jsonl), the newest 20 and 64 MiB kept
    precision_state.json   the precision guard's memory (demotions)
    last_success.json      when the agent's last successful run ended (survives a restart)
    last_run.json          the last run: outcome, precision, when and why (`genesis-fp16 status`)
    precision_calibration.json   a measured auto's timings (training/run/calibration.py)
    probe_result.json      the precision probe's record (genesis_fp16/jobs/probe_gate.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from genesis_fp16.config.agent_names import check_agent_name
from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder import layout as L
from genesis_fp16_infrastructure.agent_folder.layout import SAMPLE_DATA_MARKER
from genesis_fp16_infrastructure.contract import AgentPlugin, AgentStateFiles

SAMPLE_DATA_COUNT = 20_000
SAMPLE_DATA_SEED = 0


@dataclass(frozen=True)
class AgentPaths:
    """The folders and files of one agent under the daemon's state folder."""

    root: Path

    @classmethod
    def for_agent(cls, state_dir: Path, agent: str) -> AgentPaths:
        """``agent``'s folder under ``state_dir``; ValueError when ``agent`` is not an agent
        name (it was checked where it entered: this is the last line, never a path out)."""
        return cls(L.agent_root(state_dir, check_agent_name(agent)))

    @property
    def data_dir(self) -> Path:
        return self.root / L.DATA_FOLDER

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / L.CHECKPOINTS_FOLDER

    @property
    def quarantine_dir(self) -> Path:
        """A file per run (data.quarantine.new_quarantine_file); quarantine.jsonl, which
        every run rewrote, is no longer written."""
        return self.root / L.QUARANTINE_FOLDER

    @property
    def precision_state_path(self) -> Path:
        return L.PRECISION_STATE.at(self.root)

    @property
    def last_success_path(self) -> Path:
        """Where the daemon keeps the agent's last success time (metrics/last_success.py)."""
        return L.LAST_SUCCESS.at(self.root)

    @property
    def calibration_path(self) -> Path:
        """Where a measured ``auto`` keeps its timings (``precision show`` prints them)."""
        return L.CALIBRATION.at(self.root)

    @property
    def verification_path(self) -> Path:
        """Where the captured step's verdicts against eager are kept, beside the calibration
        (``training.run.verify_capture.verification_cache`` names the same file)."""
        return L.CAPTURE_VERDICTS.at(self.root)

    @property
    def loss_scale_path(self) -> Path:
        """Where the loss scale an fp16 run ended with is carried to the agent's next run."""
        return L.CARRIED_SCALE.at(self.root)

    def state_files(self, resume: bool = False) -> AgentStateFiles:
        """The state files a run's plan reads in one call
        (``genesis_fp16_infrastructure.contract.agent_state.read_agent_state``); ``resume``: with
        the checkpoint folder whose served model the run resumes."""
        checkpoint_dir = self.checkpoint_dir if resume else None
        return AgentStateFiles(self.precision_state_path, self.loss_scale_path, checkpoint_dir)


# The marker holds one path; anything longer is not a marker.
MARKER_BYTES = SAMPLE_DATA_MARKER.limit


def reads_data_folder(plugin: object) -> bool:
    """Whether ``plugin`` declares that it reads a folder of data files (``data_folder =
    True``): then, with no data path configured, it trains on its whole data folder, the
    generated sample and every pool a person drops beside it, not on the one generated file.

    >>> class Pools: data_folder = True
    >>> reads_data_folder(Pools()), reads_data_folder(object())
    (True, False)
    """
    return getattr(plugin, "data_folder", False) is True


def default_data_path(
    plugin: AgentPlugin,
    paths: AgentPaths,
    count: int = SAMPLE_DATA_COUNT,
    seed: int = SAMPLE_DATA_SEED,
) -> Path:
    """What ``plugin`` trains on when no data path is configured: its data folder
    (``<state>/agents/<agent>/data/``) when it reads a folder of pools
    (:func:`reads_data_folder`) and its sample lies inside it, else the generated sample
    file itself (:func:`ensure_sample_data` generates it on first use, either way)."""
    sample = ensure_sample_data(plugin, paths, count, seed)
    if not reads_data_folder(plugin):
        return sample
    try:
        Path(sample).resolve().relative_to(paths.data_dir.resolve())
    except ValueError:  # a plugin that writes its sample elsewhere: that file, as before
        return sample
    return paths.data_dir


def ensure_sample_data(
    plugin: AgentPlugin,
    paths: AgentPaths,
    count: int = SAMPLE_DATA_COUNT,
    seed: int = SAMPLE_DATA_SEED,
) -> Path:
    """Return the agent's generated sample dataset, generating it on first use.

    A marker file is written after the plugin returns, so a generation cut short by a
    signal is redone rather than half-used. It holds the path relative to the data
    folder, so a state folder copied or mounted elsewhere keeps finding its data.
    """
    marker = SAMPLE_DATA_MARKER.at(paths.data_dir)
    found = _read_marker(marker, paths.data_dir)
    if found is not None:
        return found
    paths.data_dir.mkdir(parents=True, exist_ok=True)
    data_path = plugin.generate_sample_data(paths.data_dir, count, seed)
    files.write_bytes(marker, SAMPLE_DATA_MARKER, _marker_text(data_path, paths.data_dir))
    return data_path


def _read_marker(marker: Path, data_dir: Path) -> Path | None:
    """The marked data path, or None to (re)generate: no marker, or one that is unusable
    (torn, over its bound, not UTF-8, a folder, a FIFO, a link, naming no file), which
    the agent folder's owner sets aside as ``.generated.unusable-*`` and reports. Never a
    failed run every hour for a file nobody documented."""
    text = files.load_text(marker, SAMPLE_DATA_MARKER)
    if text is None:
        return None
    path = _marked_path(text.strip(), data_dir) if text.strip() else None
    if path is not None and path.exists():
        return path
    moved = files.set_aside(
        marker, SAMPLE_DATA_MARKER, f"{marker}: names no data file ({text.strip()[:200]!r})"
    )
    if moved.aside is None and (marker.exists() or marker.is_symlink()):
        raise files.UnusableStateFile(moved.why)
    return None  # the owner logged it: the sample data is generated again


def _marker_text(data_path: Path, data_dir: Path) -> bytes:
    """The path relative to ``data_dir`` when it lies inside it (a plugin may write
    elsewhere: that path is kept as it is)."""
    try:
        return str(Path(data_path).resolve().relative_to(data_dir.resolve())).encode()
    except ValueError:
        return str(data_path).encode()


def _marked_path(text: str, data_dir: Path) -> Path:
    """The marker's path: relative ones under ``data_dir``; an absolute one (written
    before markers were relative) as it is, or, when the state folder has moved since,
    its longest tail that exists under ``data_dir``."""
    path = Path(text)
    if not path.is_absolute():
        return data_dir / path
    if path.exists():
        return path
    for start in range(1, len(path.parts)):
        moved = data_dir.joinpath(*path.parts[start:])
        if moved.exists():
            return moved
    return path
