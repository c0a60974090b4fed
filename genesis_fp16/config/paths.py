"""What an agent trains on when no data path is configured: its generated sample, or the
whole data folder for an agent that reads a folder of pools. Every folder and file of the
agent lives in its ``AgentFolder`` (``genesis_fp16_infrastructure.agent_folder.folder``),
which keeps the sample's marker too.
"""

from __future__ import annotations

from pathlib import Path

from genesis_fp16.plugin_api import AgentPlugin
from genesis_fp16_infrastructure.api import AgentFolder, capabilities_of

SAMPLE_DATA_COUNT = 20_000
SAMPLE_DATA_SEED = 0


def default_data_path(
    plugin: AgentPlugin,
    folder: AgentFolder,
    count: int = SAMPLE_DATA_COUNT,
    seed: int = SAMPLE_DATA_SEED,
    data_folder: bool | None = None,
) -> Path:
    """What ``plugin`` trains on when no data path is configured: its data folder
    (``<state>/agents/<agent>/data/``) when it reads a folder of pools (it declares
    ``data_folder = True``: plugin_api's ``ReadsDataFolder``) and its sample lies inside
    it, else the generated sample file itself (``AgentFolder.sample_data`` generates it
    on first use, either way). ``data_folder``: that declaration as the loader read it
    (the plan's ``Capabilities``), read from ``plugin`` only when not given."""
    sample = folder.sample_data(plugin.generate_sample_data, count, seed)
    if data_folder is None:
        data_folder = capabilities_of(plugin).data_folder
    if not data_folder:
        return sample
    try:
        Path(sample).resolve().relative_to(folder.data_dir.resolve())
    except ValueError:  # a plugin that writes its sample elsewhere: that file, as before
        return sample
    return folder.data_dir
