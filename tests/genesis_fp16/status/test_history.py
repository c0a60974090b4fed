"""Issue 68: a gate metric added by a plugin alone reaches the run history's marks and the
status page. The plugin below declares a second loss column; nothing outside it knows
the column's name, and its judged runs' gate and live marks, the page's history and its
watch chart carry it."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from genesis_fp16.commands.model import _live
from genesis_fp16.plugin_api import PrecisionRequest, RecordLosses, TrainRequest, TrainResult
from genesis_fp16.status.render import render_html
from genesis_fp16.status.report import DaemonStatus, NextRun, gather_status
from genesis_fp16_infrastructure.agent_folder.candidates import candidate_entry, newest_checkpoint
from genesis_fp16_infrastructure.agent_folder.transitions import serve
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.judging.run import run_plugin

AGENT = "two_losses"


@dataclass
class TwoLosses:
    """A model of one number (its checkpoint a JSON file) scored on two loss columns:
    ``sq``, the primary, and ``wobble``, the absolute error plus ``bias`` for a model of
    the number ``fixed``. Training writes ``fixed``, or the records' mean label."""

    api_version: int = 3
    name: str = AGENT
    description: str = "a model of one number, judged on two columns"
    judging_version: int = 1
    loss_span: float = 1.0
    fixed: float | None = None
    bias: float = 0.0

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        raise NotImplementedError

    def probe_setup(self, data_path: Path | None, seed: int) -> Any:
        raise NotImplementedError

    def train(self, request: TrainRequest) -> TrainResult:
        folder = Path(request.checkpoint_dir)
        folder.mkdir(parents=True, exist_ok=True)
        labels = [r["y"] for r in _records(request)]
        value = self.fixed if self.fixed is not None else sum(labels) / len(labels)
        step = len(list(folder.glob("ckpt-*.pt"))) + 1
        (folder / f"ckpt-{step:010d}.pt").write_text(json.dumps({"value": value}))
        return TrainResult(
            agent=request.agent, precision_requested="fp32", precision_used="fp32",
            precision_reason="test", device="cpu", steps=1, skipped_steps=0,
            overflow_rate=0.0, loss_scale=1.0, final_train_loss=0.0, eval={},
            samples_per_second=0.0, wall_seconds=0.0, checkpoint=None, quarantined=0,
        )  # fmt: skip

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        value = json.loads(checkpoint.read_text())["value"]
        bias = self.bias if value == self.fixed else 0.0
        records = _records(request)
        columns = {
            "sq": [(value - r["y"]) ** 2 for r in records],
            "wobble": [abs(value - r["y"]) + bias for r in records],
        }
        return RecordLosses.of([r["id"] for r in records], columns, primary="sq")


def _records(request: TrainRequest) -> list[dict[str, Any]]:
    assert request.data_path is not None
    return json.loads(Path(request.data_path).read_text())  # type: ignore[no-any-return]


def _run(plugin: TwoLosses, folder: AgentFolder, ids: range, forced: bool = False) -> TrainResult:
    """A judged run on records ``ids`` (labels about 0.5), kept in the agent's history as
    the daemon keeps it."""
    data = folder.state_dir / "data.json"
    data.write_text(json.dumps([{"id": f"r{i}", "y": 0.5 + 0.01 * (i % 3)} for i in ids]))
    request = TrainRequest(
        agent=AGENT, precision=PrecisionRequest("fp32"), precision_reason="test",
        state_dir=folder.state_dir, checkpoint_dir=folder.checkpoint_dir, device="cpu",
        seed=1, steps=1, resume=True, data_path=data,
    )  # fmt: skip
    result = run_plugin(plugin, replace(request, forced=forced))
    folder.save_run(result.history_entry(1.0, "daemon"))
    return result


def test_a_plugin_s_second_loss_column_reaches_the_marks_and_the_page(tmp_path: Path) -> None:
    """A first model; a candidate as good on ``sq`` and worse by 0.2 on ``wobble``,
    rejected; served by hand all the same, then rolled back by the watch on later
    records. The history's gate mark holds both models' scores on both columns, its live
    mark both columns' tests; the page's history holds them, and its watch chart names
    ``wobble`` where it rolled back (the chart draws ``sq``, the primary), and so does
    `model list`'s LIVE cell."""
    folder = AgentFolder(tmp_path / "state", AGENT)
    folder.root.mkdir(parents=True)
    plugin = TwoLosses()
    _run(plugin, folder, range(400))
    plugin.fixed, plugin.bias = 0.51, 0.2  # the records' mean label, worse on wobble
    rejected = _run(plugin, folder, range(400), forced=True)
    assert rejected.gate is not None and rejected.gate.candidate_id is not None
    candidate = folder.checkpoint_dir / "candidates" / rejected.gate.candidate_id
    checkpoint = newest_checkpoint(candidate)
    assert checkpoint is not None
    serve(
        folder.checkpoint_dir,
        candidate_entry(folder.checkpoint_dir, candidate, checkpoint),
        "manual",
    )
    live = _run(plugin, folder, range(400, 600)).live
    assert live is not None and live.rolled_back and live.regressed == ("wobble",)

    idle = DaemonStatus(False, None, None, None, None, None, "not running")
    report = gather_status(folder.state_dir, [AGENT], idle, lambda _: NextRun(None, "none"))
    (agent,) = report.agents
    first, gated, watched = agent.history.runs
    assert first.gate is not None and list(first.gate.candidate) == ["sq", "wobble"]
    gate = gated.gate
    assert gate is not None and gate.outcome == "rejected" and gate.primary == "sq"
    assert list(gate.candidate) == list(gate.served) == ["sq", "wobble"]
    assert agent.history.metric == "sq"
    assert gate.candidate["wobble"] > gate.served["wobble"] + 0.15  # the candidate's bias of 0.2
    mark = watched.live
    assert mark is not None and mark.primary == "sq" and list(mark.metrics) == ["sq", "wobble"]
    assert mark.rolled_back and mark.regressed == ("wobble",) and not mark.watched.regression
    reported = live.metrics["wobble"]
    assert mark.metrics["wobble"].difference == pytest.approx(reported.difference, abs=1e-6)
    page = render_html(report).decode()
    assert "rolled back on wobble: " in page and "served model&#x27;s sq" in page
    cell = _live(live.to_json())  # `model list`'s LIVE cell: the primary drawn, wobble named
    assert cell.startswith(f"{live.records} rec, sq ") and cell.endswith("; wobble REGRESSION")


@pytest.mark.parametrize(
    "figures",
    [
        {"records": 5},
        {"records": 5, "difference": "x", "lower": 0.1, "upper": 0.2},
        {"records": 5, "primary": "loss", "metrics": {"loss": {"difference": None}}},
        {"records": 5, "primary": "gone", "metrics": {"loss": {"difference": 0.1}}},
    ],
)
def test_a_live_cell_of_damaged_figures_is_a_dash(figures: dict[str, Any]) -> None:
    """`model list`'s LIVE cell of a pointer entry a hand edited: figures missing or not
    numbers show as ``-``, not a traceback."""
    assert _live(figures) == "-"
