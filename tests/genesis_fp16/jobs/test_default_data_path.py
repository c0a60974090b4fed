"""What an agent trains on when no data path is configured (run_request.default_data_path)."""

from __future__ import annotations

from pathlib import Path

from genesis_fp16.jobs.run_request import default_data_path
from genesis_fp16_agents.rlhf_ppo.plugin import RlhfPpoPlugin
from genesis_fp16_agents.se_darwin.plugin import SEDarwinPlugin
from genesis_fp16_infrastructure.api import capabilities_of
from genesis_fp16_infrastructure.folder import AgentFolder


class _Pools:
    """A plugin that reads a folder of pools and writes its sample where it is told."""

    name = "pools"
    data_folder = True

    def __init__(self, elsewhere: Path | None = None) -> None:
        self.elsewhere = elsewhere

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        path = (self.elsewhere or Path(out)) / "pool.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        return path


def test_a_plugin_that_reads_pools_trains_on_its_data_folder(tmp_path: Path) -> None:
    """data_folder = True: the folder the sample is written into, the sample inside it."""
    paths = AgentFolder(tmp_path, "pools")
    assert default_data_path(_Pools(), paths, 10, 0, True) == paths.data_dir  # type: ignore[arg-type]
    assert (paths.data_dir / "pool.json").is_file()


def test_a_sample_written_outside_the_data_folder_is_used_as_it_is(tmp_path: Path) -> None:
    """A folder reader whose sample lies elsewhere trains on that file, not on an empty
    data folder."""
    plugin = _Pools(elsewhere=tmp_path / "outside")
    found = default_data_path(plugin, AgentFolder(tmp_path / "s", "pools"), 10, 0, True)  # type: ignore[arg-type]
    assert found == tmp_path / "outside" / "pool.json"


def test_se_darwin_reads_its_folder_and_rlhf_ppo_its_task_file(tmp_path: Path) -> None:
    """The built-in agents, as they declare themselves: se_darwin's default is its data
    folder (pools dropped there are read); rlhf_ppo's is its one task file (a task, not a
    pool of records)."""
    se, se_darwin = AgentFolder(tmp_path, "se_darwin"), SEDarwinPlugin()
    found = default_data_path(se_darwin, se, 50, 0, capabilities_of(se_darwin).data_folder)
    assert found == se.data_dir
    assert list(se.data_dir.rglob("trajectory_pool.json"))
    rl, rlhf_ppo = AgentFolder(tmp_path, "rlhf_ppo"), RlhfPpoPlugin()
    found = default_data_path(rlhf_ppo, rl, 5, 0, capabilities_of(rlhf_ppo).data_folder)
    assert found == rl.data_dir / "rlhf_ppo_task.json"
