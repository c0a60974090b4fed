"""What an agent trains on when no data path is configured: its generated sample, or the
whole data folder for an agent that reads a folder of pools. Every folder and file of the
agent lives in its ``AgentFolder`` (``genesis_fp16_infrastructure.agent_folder.folder``),
which keeps the sample's marker too.
"""

from __future__ import annotations

from pathlib import Path

from genesis_fp16.plugin_api import AgentPlugin
from genesis_fp16_infrastructure.api import AgentFolder

SAMPLE_DATA_COUNT = 20_000
SAMPLE_DATA_SEED = 0


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
    folder: AgentFolder,
    count: int = SAMPLE_DATA_COUNT,
    seed: int = SAMPLE_DATA_SEED,
) -> Path:
    """What ``plugin`` trains on when no data path is configured: its data folder
    (``<state>/agents/<agent>/data/``) when it reads a folder of pools
    (:func:`reads_data_folder`) and its sample lies inside it, else the generated sample
    file itself (``AgentFolder.sample_data`` generates it on first use, either way)."""
    sample = folder.sample_data(plugin.generate_sample_data, count, seed)
    if not reads_data_folder(plugin):
        return sample
    try:
        Path(sample).resolve().relative_to(folder.data_dir.resolve())
    except ValueError:  # a plugin that writes its sample elsewhere: that file, as before
        return sample
    return folder.data_dir
