"""Every code block of README.md and docs/*.md, and what the suite does with each.

``BLOCKS`` names each block by its file and the start of its first line (a Python
block's first line after its imports). A block is run as written
(``Run``), or names the test that covers it (``Covered``), or says why it cannot run here
(``Skip``); tests/test_doc_blocks.py fails on a block this table does not name, so a new
block cannot land untested. Indented code blocks count too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


@dataclass(frozen=True)
class Block:
    """One code block: where it is, its language tag (``indented`` for a 4-space block)."""

    file: str
    index: int
    line: int
    language: str
    text: str

    @property
    def key_line(self) -> str:
        """The line ``BLOCKS`` knows it by: its first, or a Python block's first that is
        not an import (several blocks open with the same imports)."""
        lines = [line.strip() for line in self.text.splitlines() if line.strip()]
        if self.language == "python":
            lines = [line for line in lines if not line.startswith(("import ", "from "))]
        return lines[0] if lines else ""

    @property
    def id(self) -> str:
        return f"{self.file}#{self.index}-{self.language or 'untagged'}"


def collect_blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """The fenced blocks of a Markdown file, and its indented ones outside lists."""
    lines = path.read_text().splitlines()
    name = path.relative_to(root).as_posix()
    blocks: list[Block] = []
    i, previous = 0, ""
    while i < len(lines):
        fence = re.match(r"^\s*(```+|~~~+)\s*(\S*)", lines[i])
        if fence:
            start, marker, body = i, fence.group(1), []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body.append(lines[i])
                i += 1
            blocks.append(Block(name, len(blocks), start + 1, fence.group(2), "\n".join(body)))
        elif _indented_start(lines[i], previous, lines[i - 2] if i > 1 else ""):
            start, body = i, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            blocks.append(Block(name, len(blocks), start + 1, "indented", "\n".join(body).strip()))
            i -= 1
        previous = lines[i]
        i += 1
    return blocks


def _indented_start(line: str, previous: str, before: str) -> bool:
    """A 4-space line after a blank one, not continuing a list item."""
    if not line.startswith("    ") or not line.strip() or previous.strip():
        return False
    return not re.match(r"^\s*([-*+]|\d+\.)\s", before)


def all_blocks() -> list[Block]:
    return [block for path in DOC_FILES for block in collect_blocks(path)]


@dataclass(frozen=True)
class Run:
    """Run the block as written: ``sh`` with bash, ``python`` with the venv's python.

    ``state``: ``make-run`` (a folder where `make run`'s daemon serves, its first
    se_darwin job done) or ``fresh`` (an empty folder); both hold the checkout's ``.venv``.
    ``prelude``: names the text leaves to the reader, defined before it (``PRELUDES``).
    ``env``: settings that keep the run small where the text leaves them open.
    """

    state: str
    slow: bool = False
    prelude: str | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Covered:
    """Another test runs or checks this block: ``test`` is ``path::function``."""

    test: str
    why: str


@dataclass(frozen=True)
class Skip:
    """Not run in the suite, and why: one of ``SKIP_KINDS``."""

    kind: str
    why: str


Plan = Run | Covered | Skip

SKIP_KINDS = (
    "needs a GPU",
    "needs a cluster",
    "needs root and systemd",
    "starts a service forever",
    "output sample",
    "diagram",
    "a measurement's record",
)

# Sample data small enough for a few seconds' run; the block's text leaves it open.
SMALL_POOL = {"GENESIS_FP16_SAMPLE_COUNT": "400"}

_TASK = """
import torch


class _Task:  # the smallest TrainingTask: y = 2 * sum(x)
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(256, 4, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True) * 2

    def build_model(self):
        return torch.nn.Linear(4, 1)

    def build_optimizers(self, model):
        return [torch.optim.AdamW(model.parameters(), 1e-2)]

    def build_schedulers(self, optimizers):
        return ()

    def train_batches(self, epoch, seed):
        order = torch.randperm(256, generator=torch.Generator().manual_seed(seed + epoch))
        for i in range(0, 256, 64):
            yield (self.x[order[i : i + 64]], self.y[order[i : i + 64]]), 64

    def loss(self, model, batch):
        return torch.nn.functional.mse_loss(model(batch[0]).float(), batch[1])

    def evaluate(self, model):
        return {"loss": float(self.loss(model, (self.x, self.y)))}

    def extra_state(self):
        return {}


task = _Task()
"""

_PROBE_INPUTS = """
from pathlib import Path
from genesis_fp16_agents.se_darwin import plugin

seed, device = 0, "cpu"
data_path = plugin.generate_sample_data(Path("data"), 400, seed)
"""

# What a prelude defines is what the block's own text says the reader brings.
PRELUDES = {
    "task": _TASK,  # "`task` is any object with build_model, ..." (docs/library.md)
    "probe_inputs": _PROBE_INPUTS,  # an installed plugin, its data, a seed and a device
}

_UNIT = "needs root and systemd; the unit's install lines, run by tests/test_packaging.py"
_DEPLOY = "tests/deploy/test_readme_deployment.py::test_"
_TRACKING = (
    "tests/genesis_fp16/metrics/test_tracking.py::test_train_tracking_dir_writes_a_readable_run"
)
_CLAIMS = "tests/test_doc_claims.py::test_"
_RECORD = "a measurement's record"

# (file, the start of the block's key line) -> its plan.
BLOCKS: dict[tuple[str, str], Plan] = {
    ("README.md", "make run    # set up"): Covered(
        "tests/test_readme.py::test_readme_opens_with_make_run_and_make_test",
        "make run serves forever and make test is the suite itself; tests/test_makefile.py "
        "reads both targets, test_daemon_embedded_default.py starts the daemon as they do",
    ),
    ("README.md", "GENESIS_FP16_STATE_DIR=$(mktemp -d) .venv/bin/genesis-fp16 train"): Run(
        "make-run", slow=True
    ),
    ("README.md", "[info] daemon ready"): Skip(
        "output sample", "make run's first log lines, abridged, from a daemon on a 2-core CPU"
    ),
    ("README.md", "se_darwin"): Covered(
        "tests/genesis_fp16/status/test_status_page.py::test_status_text_and_the_page_show_the_same_rows",
        "output sample of `genesis-fp16 status` for one agent (its times vary)",
    ),
    ("README.md", "ID                           STATE"): Covered(
        "tests/test_readme.py::test_the_live_legend_is_what_model_list_prints",
        "output sample of `model list`; its LIVE legend's example is model list's own cell",
    ),
    ("docs/install.md", ".venv/bin/pip install -c constraints.txt -e '.[bench]'"): Covered(
        f"{_CLAIMS}bench_without_its_extra_names_the_line_the_install_doc_gives",
        "pip install into the suite's own venv would change it for every other test; the "
        "test checks the refusal without the extra, and the extra's line and contents",
    ),
    ("docs/commands.md", "genesis-fp16 serve [--env-file F]"): Covered(
        f"{_CLAIMS}the_commands_block_names_every_command_and_flag",
        "a synopsis: every command and flag of the parser is in it, and nothing else",
    ),
    ("docs/deployment.md", "sudo python3 -m venv /tmp/genesis-fp16-build"): Covered(
        f"{_DEPLOY}systemd_commands_are_the_units_install_lines", _UNIT
    ),
    ("docs/deployment.md", "docker build --build-arg TORCH=cu128"): Covered(
        f"{_DEPLOY}statefulset_commands_name_the_built_image_and_its_objects",
        "needs a registry and a cluster; its files and objects are checked",
    ),
    ("docs/deployment.md", "docker build -t ghcr.io/example/genesis-fp16:0.1.0 ."): Covered(
        f"{_DEPLOY}the_cpu_lines_replace_only_the_image_and_the_statefulset",
        "needs a registry and a cluster; its files and objects are checked",
    ),
    (
        "docs/deployment.md",
        "kubectl apply -f deploy/k8s/configmap.yaml -f deploy/k8s/trainjob",
    ): Covered(
        f"{_DEPLOY}kubeflow_commands_name_the_trainjob_and_its_pods",
        "needs a cluster with Kubeflow Trainer; its files and objects are checked",
    ),
    ("docs/training.md", 'policy = PrecisionPolicy.create("auto", "cpu")  # resolved once'): Run(
        "fresh"
    ),
    ("README.md", ".venv/bin/genesis-fp16 new-agent my_agent"): Covered(
        "tests/genesis_fp16/scaffold/test_new_agent.py::"
        "test_the_scaffold_installs_in_a_fresh_venv_and_trains_under_serve",
        "pip install into the suite's own venv would change it for every other test; that "
        "test runs these lines as written in a venv of its own",
    ),
    ("docs/plugins.md", "[build-system]"): Covered(
        "tests/genesis_fp16/scaffold/test_new_agent.py::test_the_plugin_docs_show_the_scaffold_output",
        "new-agent's pyproject.toml, byte for byte",
    ),
    ("docs/plugins.md", '"""my_agent: a genesis-fp16 agent plugin'): Covered(
        "tests/test_readme.py::test_plugin_example_is_discovered_and_trains",
        "installed by entry point, listed and trained",
    ),
    ("docs/results.md", "genesis-fp16 bench            # or"): Skip(
        _RECORD,
        "the whole benchmark: tens of minutes on a 2-core CPU; `bench --tiny` runs in "
        "tests/genesis_fp16/bench/test_bench.py::test_tiny_run_writes_every_documented_column",
    ),
    ("docs/commands.md", "torchrun --nproc-per-node 2 -m genesis_fp16 train se_darwin"): Run(
        "fresh", slow=True, env=SMALL_POOL
    ),
    (
        "docs/install.md",
        "python3 -m pip download -q --no-deps --only-binary=:all: -d .whl",
    ): Covered(
        "tests/test_gpu_check.py::test_the_bare_host_download_runs_as_written",
        "run as written in a copy of the checkout's constraints (it writes .whl/ where it runs); "
        "the list is every runtime dependency but torch and numpy",
    ),
    ("docs/install.md", "python3 -m pip install --no-index --no-deps .whl/*.whl"): Skip(
        "needs a GPU",
        "cp312 wheels on a bare CUDA host, then make gpu-check; the wheels' download is run "
        "as written by tests/test_gpu_check.py",
    ),
    ("docs/results.md", "make setup-cuda && make gpu-check"): Skip(
        "needs a GPU", "make gpu-check stops at once without CUDA (tests/test_makefile.py)"
    ),
    ("docs/architecture.md", "flowchart BT"): Skip("diagram", "Mermaid, drawn by GitHub"),
    ("docs/architecture.md", "flowchart LR"): Skip("diagram", "Mermaid, drawn by GitHub"),
    ("docs/architecture.md", "class Scored:"): Run("fresh"),
    ("docs/configuration.md", "echo 'GENESIS_FP16_STATE_DIR=state' > .env"): Run("fresh"),
    ("docs/benchmarks.md", "pip install -e '.[bench]'"): Skip(
        "needs a GPU",
        "its last lines are --device cuda runs; the whole bench takes tens of minutes",
    ),
    ("docs/daemon.md", "$ genesis-fp16 run se_darwin"): Covered(
        "tests/genesis_fp16/service/test_daemon_run_now.py::"
        "test_run_starts_the_agent_at_once_and_refuses_no_daemon_and_unknown",
        "output sample: what `run se_darwin` prints beside a real daemon",
    ),
    ("docs/daemon.md", "genesis-fp16 config check"): Covered(
        f"{_CLAIMS}every_command_the_docs_name_exists",
        "a synopsis (serve runs forever): every command and flag it names exists",
    ),
    ("docs/daemon.md", "GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__PRESET=bf16_fp32_kl"): Run(
        "fresh", slow=True
    ),
    ("docs/distributed.md", "torchrun --standalone --nproc-per-node 2"): Run(
        "fresh", slow=True, env=SMALL_POOL
    ),
    ("docs/distributed.md", "python -m torch.distributed.run --nnodes=$PET_NNODES"): Covered(
        "tests/genesis_fp16/launch/test_kubeflow.py::test_pet_layout_becomes_torchruns_flags",
        "what train execs in a Kubeflow pod (`<the same arguments>` is a placeholder); two "
        "nodes: test_kubeflow.py::test_two_nodes_driven_only_by_pet_variables",
    ),
    ("docs/distributed.md", "genesis-fp16: error: rlhf_ppo: world size 2"): Covered(
        "tests/agents/rlhf_ppo/test_rlhf_single_process.py::test_two_ranks_are_refused_before_training",
        "output sample: the error two ranks get",
    ),
    ("docs/library.md", 'policy = PrecisionPolicy.create("auto", "cpu", scaler='): Run("fresh"),
    ("docs/library.md", 'policy = PrecisionPolicy.create("auto", "cpu")'): Run("fresh"),
    ("docs/library.md", "result = fit("): Run("fresh", prelude="task"),
    ("docs/operations.md", "sudo sed -i 's/^ENABLE_FP16_TRAINING=.*/"): Skip(
        "needs root and systemd",
        "the reload itself: tests/genesis_fp16/service/test_daemon_serve.py",
    ),
    ("docs/operations.md", "kubectl edit configmap genesis-fp16-config"): Skip(
        "needs a cluster", "an interactive edit of a live ConfigMap"
    ),
    ("docs/operations.md", "sudo python3 -m venv /tmp/genesis-fp16-build"): Covered(
        "tests/test_packaging.py::test_unit_install_lines_are_the_runbooks", _UNIT
    ),
    ("docs/operations.md", "daemon"): Covered(
        "tests/genesis_fp16/status/test_status_page.py::test_status_text_and_the_page_show_the_same_rows",
        "output sample of `genesis-fp16 status` beside a real daemon (its pid and times vary)",
    ),
    ("docs/operations.md", "sudo mkdir -p /etc/systemd/system/genesis-fp16.service.d"): Skip(
        "needs root and systemd", "a drop-in for a running unit; the unit passes systemd-analyze"
    ),
    ("docs/operations.md", "docker build --build-arg TORCH=cu128"): Covered(
        f"{_DEPLOY}statefulset_commands_name_the_built_image_and_its_objects",
        "needs a registry and a cluster; the README's same lines are checked",
    ),
    ("docs/operations.md", "make dist "): Covered(
        "tests/deploy/test_dockerfile.py::test_hadolint_passes_without_any_finding",
        "needs a container engine and a registry; make dist is "
        "tests/test_makefile.py::test_dist_builds_with_the_standard_front_end",
    ),
    (
        "docs/operations.md",
        "kubectl apply -f deploy/k8s/configmap.yaml -f deploy/k8s/trainjob",
    ): Covered(
        "tests/deploy/test_trainjob.py",
        "needs a cluster with Kubeflow Trainer; the TrainJob is validated",
    ),
    (
        "docs/precision-forensics.md",
        "export ENABLE_FP16_TRAINING=true GENESIS_FP16_GUARD_CHECK_INTERVAL=5 GENESIS_FP16",
    ): Covered(
        "tests/genesis_fp16/commands/test_cli_replay_agents.py::test_se_darwin_bundle_replays_and_names_where",
        "the same train and replay --against fp32 (the bundle's name holds its time)",
    ),
    (
        "docs/precision-forensics.md",
        "step 2 (demotion), recorded in fp16 on cpu, replayed in",
    ): Skip("output sample", "replay's output for a real se_darwin bundle, as it printed it"),
    (
        "docs/precision-forensics.md",
        ".venv/bin/python benchmarks/flight_recorder.py --seeds 10 --skip overhead,bounded",
    ): Skip(_RECORD, "about 3 minutes of fp16 runs; how the section's 30 faults were measured"),
    ("docs/precision-forensics.md", ".venv/bin/python benchmarks/forensics.py"): Skip(
        _RECORD, "about 6 minutes of PPO runs; how the section's table was made"
    ),
    (
        "docs/precision-guard.md",
        "genesis-fp16 replay /var/lib/genesis-fp16/agents/se_darwin/fault_bundles/2026112",
    ): Covered(
        "tests/genesis_fp16/commands/test_cli_replay.py::test_train_writes_a_bundle_that_replay_reproduces_and_explains",
        "a real train writes a bundle, and replay runs it with --json, --precision, --device",
    ),
    ("docs/precision-guard.md", "python benchmarks/flight_recorder.py --seeds 10"): Skip(
        _RECORD, "about 25 minutes on 2 cores; how the section's tables were made"
    ),
    (
        "docs/precision-guard.md",
        "python benchmarks/flight_recorder.py --skip faults,bounded --rounds 6 --large-rounds 3",
    ): Skip(_RECORD, "about 4 minutes on a quiet machine; how the quiet overhead table was made"),
    ("docs/precision-guard.md", "result = fit(task, FitOptions("): Run(
        "fresh", slow=True, prelude="task"
    ),
    ("docs/precision-probe.md", "genesis-fp16 probe se_darwin --steps 10"): Run(
        "fresh", slow=True, env=SMALL_POOL
    ),
    ("docs/precision-probe.md", "report = run_probe("): Run(
        "fresh", slow=True, prelude="probe_inputs"
    ),
    ("docs/se-darwin.md", "python benchmarks/world_model_quality.py --sizes"): Skip(
        _RECORD, "hours of training; how the section's table was made"
    ),
    ("docs/se-darwin.md", "python benchmarks/world_model_quality.py --ablation"): Skip(
        _RECORD, "hours of training; how the section's table was made"
    ),
    ("docs/se-darwin.md", "predictor = WorldModelPredictor.load("): Run("make-run", slow=True),
    ("docs/se-darwin.md", "cp ~/exports/qa_pool.json state/agents/se_darwin/data/"): Covered(
        "tests/genesis_fp16/jobs/test_daemon_dropped_data.py::"
        "test_pools_dropped_beside_the_sample_are_trained_on_quarantined_or_cost_nothing",
        "a pool copied into a real daemon's data folder is trained on at its next run",
    ),
    ("docs/se-darwin.md", "genesis-fp16 train AGENT"): Covered(
        f"{_CLAIMS}every_command_the_docs_name_exists",
        "a synopsis: every command and flag it names exists",
    ),
    ("docs/se-darwin.md", "# pyproject.toml of my-agent"): Covered(
        f"{_CLAIMS}the_minimal_plugin_of_se_darwin_md_trains",
        "installed by entry point with the next block and trained as the text says",
    ),
    ("docs/se-darwin.md", "# my_agent/__init__.py"): Covered(
        f"{_CLAIMS}the_minimal_plugin_of_se_darwin_md_trains",
        "installed by entry point and trained as the text says",
    ),
    ("docs/tracking.md", "<tracking dir>/<agent>/<run_id>/"): Covered(
        _TRACKING + "_and_a_pipe_gets_no_bar", "output sample: the layout the test finds"
    ),
    ("docs/tracking.md", "pip install 'genesis-fp16[tensorboard]'"): Covered(
        _TRACKING + "_and_a_pipe_gets_no_bar",
        "starts a service forever (serve); the train line is the test's",
    ),
    ("docs/tracking.md", "tensorboard --logdir"): Skip(
        "starts a service forever", "TensorBoard's server, and an ssh tunnel"
    ),
    ("docs/tracking.md", "GENESIS_FP16_STATE_DIR=/tmp/curve-state"): Skip(
        _RECORD,
        "how docs/run-curves.png was made: 5 minutes of emulated fp16, that run's own run id, "
        "and it rewrites a committed file; the plot script runs in test_tracking.py",
    ),
    ("docs/tracking.md", "83%|"): Skip("output sample", "tqdm's bar on a terminal"),
    ("docs/events.md", "GENESIS_FP16_EVENTS_URLS=https://hooks.example.com"): Covered(
        "tests/genesis_fp16/commands/test_events.py::"
        "test_the_docs_settings_load_and_bad_ones_are_one_line",
        "loads these two lines as settings (the hosts are examples)",
    ),
    ("docs/events.md", '{"agent":"se_darwin"'): Skip(
        "output sample", "a body as posted; the next block checks its signature"
    ),
    ("docs/events.md", "def verified(secret: bytes"): Run("fresh"),
    ("docs/events.md", "genesis-fp16 events list"): Covered(
        "tests/genesis_fp16/events/test_daemon_events.py::"
        "test_a_promotion_pin_and_unpin_reach_the_receiver_signed_and_in_order",
        "list, list --json and redeliver against a real daemon's state and receiver",
    ),
    ("docs/events.md", "ID                AGENT"): Skip(
        "output sample", "`events list` for a receiver that refused (a port nobody serves)"
    ),
}


def plan_of(block: Block) -> Plan | None:
    """The plan of the table's entry whose line starts the block's key line (the longest)."""
    found = [
        (len(start), plan)
        for (file, start), plan in BLOCKS.items()
        if file == block.file and block.key_line.startswith(start)
    ]
    return max(found, key=lambda pair: pair[0])[1] if found else None


def install_plugin(site: Path, pyproject: str, source: str) -> str:
    """Install a doc's plugin as pip would, under ``site``: its module, named by the
    pyproject's entry point, and a dist-info holding that entry point. Returns its name."""
    found = re.search(r'\[project\.entry-points\."([^"]+)"\]\n(\S+) = "([^"]+)"', pyproject)
    assert found, "the pyproject names no entry point"
    group, name, target = found.groups()
    module = target.split(":")[0]
    package = site / module
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(source)
    dist_info = site / f"{module}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[{group}]\n{name} = {target}\n")
    return name
