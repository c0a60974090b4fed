"""The benchmark runs end to end, writes its documented columns, and tells the truth."""

from __future__ import annotations

import contextlib
import csv
import datetime
import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16.bench.config import DEFAULT_RUNNERS, BenchConfig
from genesis_fp16.bench.measure import SyncCounter, count_sync_warnings, run_config
from genesis_fp16.bench.report import COLUMNS, derive, note_for
from genesis_fp16.bench.run import (
    BenchOptions,
    _run_isolated,
    fresh_out_dir,
    load_warning,
    plan,
    run_benchmark,
)
from genesis_fp16.bench.runners import HandWrittenRunner, OursRunner
from genesis_fp16.cli import main as cli_main
from genesis_fp16_infrastructure.errors import ExecutionError
from genesis_fp16_infrastructure.training.step.execution import ResolvedExecution


def _tiny(precision: str, runner: str, device: str = "cpu") -> BenchConfig:
    return BenchConfig(
        size="default",
        precision=precision,
        runner=runner,
        device=device,
        batch_size=16,
        warmup_steps=1,
        timed_steps=2,
        tiny=True,
    )


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open() as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


@pytest.mark.slow
def test_tiny_run_writes_every_documented_column(tmp_path: Path) -> None:
    """A tiny fp32+bf16 run of all four runners writes CSV, PNG and table with real values."""
    options = BenchOptions(
        device="cpu",
        sizes=("default",),
        precisions=("fp32", "bf16"),
        runners=("ours", "hand", "accelerate", "fabric"),
        batch_sizes=(16,),
        warmup=1,
        steps=2,
        out_dir=tmp_path,
        in_process=True,
        tiny=True,
        threads=1,
        tag="smoke",
    )
    _, csv_path = run_benchmark(options, "test-command", progress=lambda _: None)
    header, written = _read(csv_path)
    assert header == list(COLUMNS)
    assert csv_path.name.startswith("bench_cpu-") and csv_path.name.endswith("_tiny_smoke.csv")
    assert csv_path.with_suffix(".png").stat().st_size > 0
    assert len(written) == 8
    for row in written:
        assert row["honest"] == "True", row["note"]
        assert row["precision_ran"] == row["precision_requested"]
        assert float(row["median_step_ms"]) > 0 and math.isfinite(float(row["eval_loss"]))
        assert row["command"] == "test-command" and row["torch_version"] == torch.__version__
        assert row["device"] == "cpu" and row["device_name"] and row["threads"] == "1"
    by_key = {(r["runner"], r["precision_requested"]): r for r in written}
    hand_fp32 = by_key["hand", "fp32"]
    assert float(hand_fp32["time_vs_hand"]) == 1.0 and float(hand_fp32["eval_loss_gap"]) == 0.0
    ours_bf16 = by_key["ours", "bf16"]
    assert ours_bf16["eval_loss_fp32"] and ours_bf16["speedup_vs_fp32"]


def test_autocast_disabled_behind_the_runners_back_is_not_reported_as_bf16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A runner asked for bf16 whose autocast became a no-op is reported as the fp32 it ran."""
    with monkeypatch.context() as patched:  # the hand-written step's torch.autocast, a no-op
        patched.setattr(torch, "autocast", lambda *args, **kwargs: contextlib.nullcontext())
        cheated = run_config(_tiny("bf16", "hand"), isolated=False)
    honest_fp32 = run_config(_tiny("fp32", "hand"), isolated=False)
    rows: list[dict[str, Any]] = [honest_fp32, cheated]
    derive(rows)
    assert cheated["precision_ran"] == "fp32"
    assert cheated["honest"] is False
    assert "not a bf16 result" in note_for(cheated)
    # No ratio is computed against the fp32 row under the bf16 name.
    assert "speedup_vs_fp32" not in cheated and "eval_loss_gap" not in cheated


def test_unpatched_hand_written_loop_runs_bf16() -> None:
    """Without the monkeypatch the same configuration really runs bf16 (the probe can pass)."""
    row = run_config(_tiny("bf16", "hand"), isolated=False)
    assert row["precision_ran"] == "bf16" and row["honest"] is True


def _diverge(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand-written runner's weights turn NaN after each step: training diverges."""
    real_step = HandWrittenRunner.step

    def diverging_step(self: HandWrittenRunner, batch: Any) -> None:
        real_step(self, batch)
        with torch.no_grad():
            next(self.model.parameters()).fill_(float("nan"))

    monkeypatch.setattr(HandWrittenRunner, "step", diverging_step)


def test_a_row_whose_training_diverged_says_so_in_its_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A row that ran honestly but ended with a NaN eval loss is flagged in its note."""
    _diverge(monkeypatch)
    row = run_config(_tiny("fp32", "hand"), isolated=False)
    assert row["honest"] is True and math.isnan(row["eval_loss"])
    assert "training diverged" in note_for(row)
    monkeypatch.undo()
    assert "diverged" not in note_for(run_config(_tiny("fp32", "hand"), isolated=False))


def test_a_diverged_rows_json_is_strict_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench --json` of a row whose eval loss is NaN says null, at the top of the row and
    in its eval_loss_at (json.dumps alone would write NaN, which is not JSON)."""
    _diverge(monkeypatch)
    tiny = ["bench", "--device", "cpu", "--tiny", "--runners", "hand", "--precisions", "fp32",
            "--batch-size", "16", "--warmup", "0", "--steps", "1", "--in-process",
            "--out-dir", str(tmp_path), "--json"]  # fmt: skip
    assert cli_main(tiny) == 0

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the --json output")

    (row,) = json.loads(capsys.readouterr().out, parse_constant=refuse)["rows"]
    assert row["eval_loss"] is None and list(row["eval_loss_at"].values()) == [None]


@pytest.mark.parametrize("runner", ["accelerate", "fabric"])
def test_peer_fp16_on_cpu_is_labelled_with_what_ran(runner: str) -> None:
    """A peer asked for fp16 on CPU is honest only if fp16 really reached the Linear layers."""
    row = run_config(_tiny("fp16", runner), isolated=False)
    assert row["precision_ran"] in ("fp32", "bf16", "fp16")
    assert row["honest"] is (row["precision_ran"] == "fp16")
    if not row["honest"]:
        assert f"but {row['precision_ran']} ran" in note_for(row)


@pytest.mark.slow
def test_worker_subprocess_measures_its_own_peak_rss() -> None:
    """A configuration run in a fresh process reports its peak RSS over its baseline."""
    row = _run_isolated(_tiny("fp32", "hand"))
    assert row["mem_measure"] == "cpu_peak_rss_over_baseline"
    assert row["peak_mem_mb"] is not None and row["peak_mem_mb"] >= 0
    assert row["precision_ran"] == "fp32"


def test_cpu_plan_gives_fp16_fewer_steps_and_fp32_a_matching_eval_point() -> None:
    """fp16 on CPU runs fewer steps; fp32 records its eval loss at fp16's step count too."""
    options = BenchOptions(
        device="cpu", sizes=("large",), precisions=("fp32", "fp16"), runners=("hand",)
    )
    fp32, fp16 = plan(options)
    assert fp16.total_steps < fp32.total_steps
    assert fp32.eval_at == (fp16.total_steps,)


def test_auto_rows_are_planned_for_our_runners_only() -> None:
    """auto is how the daemon resolves a precision: only our runners have it to time."""
    from genesis_fp16.bench.run import options_from_args

    options = options_from_args(
        _args("--device", "cpu", "--sizes", "large", "--precisions", "fp32,auto")
    )
    assert [(c.runner, c.precision) for c in plan(options) if c.precision == "auto"] == [
        ("ours", "auto")
    ]
    with pytest.raises(ValueError, match="--precisions auto: only ours, ours-graph resolve auto"):
        options_from_args(_args("--device", "cpu", "--precisions", "auto", "--runners", "hand"))


@pytest.mark.parametrize("bf16_native", [False, True])
def test_an_auto_row_runs_what_the_calibration_chose_and_says_so(
    bf16_native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fp32 the only native precision nothing is timed; with bf16 taken as native
    (its arithmetic is real either way) both are timed on the row's own model and the row
    runs, and is labelled with, the choice."""
    from genesis_fp16_infrastructure.training.precision import decide
    from genesis_fp16_infrastructure.training.precision.decide import DeviceCapabilities

    # Both cases set the capabilities: on a CPU with AVX512-BF16 bf16 really is native.
    if bf16_native:
        caps = DeviceCapabilities("cpu", True, False, "test: bf16 taken as native")
    else:
        caps = DeviceCapabilities("cpu", False, False, "test: fp32 the only native precision")
    # One patch: the calibration's candidates and the rule both ask capabilities.
    monkeypatch.setattr(decide, "detect_capabilities", lambda device: caps)
    row = run_config(_tiny("auto", "ours"), isolated=False)
    assert row["honest"] and row["precision_ran"] in {"fp32", "bf16"}, row["runner_note"]
    note = row["runner_note"]
    if bf16_native:
        assert f"auto -> {row['precision_ran']}, eager: measured" in note
        assert "calibration took" in note
    else:
        assert row["precision_ran"] == "fp32" and "one candidate, nothing to time" in note


def test_bad_arguments_are_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown sizes and precisions are refused naming the value and the valid choices."""
    assert cli_main(["bench", "--device", "cpu", "--precisions", "fp8"]) == 2
    assert "'fp8': choose from fp32, bf16, fp16, auto" in capsys.readouterr().err
    if torch.cuda.is_available():  # CUDA adds TF32 to the choices
        assert cli_main(["bench", "--device", "cuda", "--precisions", "fp8"]) == 2
        assert "'fp8': choose from fp32, tf32, bf16, fp16, auto" in capsys.readouterr().err
    assert cli_main(["bench", "--sizes", "huge"]) == 2
    assert "'huge': choose from default, large" in capsys.readouterr().err


def test_sync_count_takes_only_torchs_sync_warnings() -> None:
    """The sync warning counts; torch 2.11's prototype notice and other warnings do not."""
    messages = [
        "called a synchronizing CUDA operation",
        "Synchronization debug mode is a prototype feature and does not yet detect all "
        "synchronizing operations",
        "torch.cuda.amp.GradScaler is deprecated",
        "called a synchronizing CUDA operation",
    ]
    assert count_sync_warnings(messages) == 2
    assert count_sync_warnings(messages[1:3]) == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sync_counter_counts_host_reads_on_cuda() -> None:
    """Two .item() calls inside the counted region are two syncs; device-only work is none."""
    x = torch.ones(4, device="cuda")
    counter = SyncCounter(torch.device("cuda"))
    with counter.counting():
        x.mul_(2).add_(1)
    assert counter.count == 0
    with counter.counting():
        x.sum().item()
        x.max().item()
    assert counter.count == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_rows_report_tf32_syncs_and_device_memory() -> None:
    """On CUDA the TF32 row runs TF32, strict fp32 does not, and syncs and memory are measured."""
    tf32 = run_config(_tiny("tf32", "hand", device="cuda"), isolated=False)
    assert tf32["precision_ran"] == "tf32" and tf32["honest"] is True
    strict = run_config(_tiny("fp32", "hand", device="cuda"), isolated=False)
    assert strict["precision_ran"] == "fp32" and strict["honest"] is True
    fp16 = run_config(_tiny("fp16", "ours", device="cuda"), isolated=False)
    assert fp16["precision_ran"] == "fp16"
    assert fp16["host_syncs_per_step"] is not None
    assert fp16["mem_measure"] == "cuda_max_memory_allocated_over_row_start"
    assert fp16["peak_mem_mb"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_rows_peak_leaves_out_what_earlier_rows_left_allocated() -> None:
    """The same row twice in one process, 256 MiB kept allocated in between (what an
    earlier row's graph pool would hold): the second peak is the first, within 5%."""
    first = run_config(_tiny("fp16", "ours-graph", device="cuda"), isolated=False)
    kept = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    second = run_config(_tiny("fp16", "ours-graph", device="cuda"), isolated=False)
    del kept
    assert abs(second["peak_mem_mb"] - first["peak_mem_mb"]) <= 0.05 * first["peak_mem_mb"]


def _args(*argv: str) -> Any:
    from genesis_fp16.cli import build_parser

    return build_parser("bench").parse_args(["bench", *argv])


def test_batch_sizes_runners_and_their_defaults_per_device() -> None:
    """--batch-sizes plans every size; a CPU gets 64 and the eager runners; errors name the flag."""
    from genesis_fp16.bench.run import options_from_args

    cpu = options_from_args(_args("--device", "cpu"))
    assert cpu.batch_sizes == (64,) and cpu.runners == ("ours", "hand", "accelerate", "fabric")
    assert not cpu.in_process
    two = options_from_args(_args("--device", "cpu", "--batch-sizes", "64,8192"))
    configs = plan(replace(two, sizes=("large",), precisions=("bf16",), runners=("ours",)))
    assert [c.batch_size for c in configs] == [64, 8192]
    assert options_from_args(_args("--device", "cpu", "--batch-size", "32")).batch_sizes == (32,)
    for argv, message in (
        (("--runners", "hand-graph"), "CUDA graphs need --device cuda"),
        (("--batch-sizes", "64,x"), "--batch-sizes '64,x'"),
        (("--batch-sizes", "0"), "at least 1"),
        (("--batch-size", "8", "--batch-sizes", "16"), "give one of them"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            options_from_args(_args("--device", "cpu", *argv))


def test_tiny_is_one_size_ours_and_hand_in_one_process_and_flags_widen_it() -> None:
    """bench --tiny: the default size, ours and hand, all precisions (auto for ours), 1+5
    steps, in one process: 7 rows; --sizes, --runners and --steps still choose."""
    from genesis_fp16.bench.run import options_from_args

    tiny = options_from_args(_args("--device", "cpu", "--tiny"))
    assert (tiny.sizes, tiny.runners, tiny.in_process) == (("default",), ("ours", "hand"), True)
    assert (tiny.warmup, tiny.steps) == (1, 5)
    assert len(plan(tiny)) == 7
    wide = options_from_args(
        _args("--device", "cpu", "--tiny", "--sizes", "default,large", "--runners", "hand",
              "--steps", "2")
    )  # fmt: skip
    assert (wide.sizes, wide.runners, wide.steps) == (("default", "large"), ("hand",), 2)
    plain = options_from_args(_args("--device", "cpu"))
    assert (plain.sizes, plain.warmup, plain.steps) == (("default", "large"), 4, 20)


def test_the_large_preset_is_larger_tiny_or_not(tmp_path: Path) -> None:
    """The bench's large model has more parameters than its default one, --tiny as well
    (24,069 against 917; 12,718,085 against 7,941 in full, on the pool's 49 features)."""
    from genesis_fp16_infrastructure.world_model.workload import (
        build_workload,
        load_data,
        write_data,
    )

    counts = {}
    for tiny in (True, False):
        data = load_data(write_data(tmp_path / str(tiny), tiny, 0), 64, torch.device("cpu"))
        for size in ("default", "large"):
            model = build_workload(size, data, 0, tiny, torch.device("cpu")).model
            counts[tiny, size] = sum(p.numel() for p in model.parameters())
    assert counts == {
        (True, "default"): 917,
        (True, "large"): 24_069,
        (False, "default"): 7_941,
        (False, "large"): 12_718_085,
    }


def test_ours_graph_compile_is_a_cuda_row_and_a_cpu_refuses_it_naming_why() -> None:
    """ours-graph-compile is in CUDA's default set; a CPU refuses the flag and the row."""
    from genesis_fp16.bench.run import options_from_args

    assert "ours-graph-compile" in DEFAULT_RUNNERS["cuda"]
    assert "ours-graph-compile" not in DEFAULT_RUNNERS["cpu"]
    with pytest.raises(ValueError, match="ours-graph-compile: CUDA graphs need --device cuda"):
        options_from_args(_args("--device", "cpu", "--runners", "ours-graph-compile"))
    with pytest.raises(ExecutionError, match=r"^compile=on .* CUDA graphs need a CUDA device"):
        run_config(_tiny("fp32", "ours-graph-compile"), isolated=False)


def test_a_batch_larger_than_the_data_is_drawn_from_it_at_full_size(tmp_path: Path) -> None:
    """A batch of 8192 from a pool of 2048 records has 8192 rows, not the 1638 there are."""
    from genesis_fp16_infrastructure.world_model.workload import (
        RESAMPLED_BATCHES,
        load_data,
        write_data,
    )

    data = load_data(write_data(tmp_path, tiny=True, seed=0), 512, torch.device("cpu"))
    assert len(data.train_batches) == RESAMPLED_BATCHES
    assert all(t.shape[0] == 512 for batch in data.train_batches for t in batch)
    small = load_data(write_data(tmp_path / "b", tiny=True, seed=0), 16, torch.device("cpu"))
    assert len(small.train_batches) > 1 and small.train_batches[0][0].shape[0] == 16


def test_the_workload_encodes_the_lineage_as_the_plugin_does(tmp_path: Path) -> None:
    """The bench trains on what the plugin trains on: the grandparents', siblings' and
    parents' operators' columns vary over the pool (encoded with the scores alone, as
    before, they were constant)."""
    from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES
    from genesis_fp16_infrastructure.world_model.workload import load_data, write_data

    data = load_data(write_data(tmp_path, tiny=False, seed=0), 256, torch.device("cpu"))
    x = torch.cat([batch[0] for batch in data.train_batches] + [data.eval_set[0]])
    names = ("grandparent_score_mean", "log_siblings", "sibling_score_mean", "parents_baseline")
    spread = x[:, [NUMERIC_FEATURES.index(n) for n in names]].std(dim=0)
    assert (spread > 0.1).all(), dict(zip(names, spread.tolist(), strict=True))


def test_fp32_references_match_within_a_batch_size() -> None:
    """derive() compares a row with the fp32 and hand rows of its own batch size only."""

    def row(batch: int, runner: str, precision: str, ms: float) -> dict[str, Any]:
        return {
            "size": "large", "batch_size": batch, "runner": runner, "honest": True,
            "precision_requested": precision, "median_step_ms": ms, "eval_loss": 1.0,
            "warmup_steps": 1, "timed_steps": 1,
        }  # fmt: skip

    rows = [
        row(64, "hand", "fp32", 4.0),
        row(64, "hand", "bf16", 2.0),
        row(8192, "hand", "fp32", 40.0),
        row(8192, "hand", "bf16", 10.0),
    ]
    derive(rows)
    assert rows[1]["speedup_vs_fp32"] == 2.0 and rows[3]["speedup_vs_fp32"] == 4.0


@pytest.mark.slow
def test_compile_row_runs_on_a_cpu_and_reports_eager_execution() -> None:
    """torch.compile(model) trains a tiny fp32 row honestly; no kernels are counted off CUDA."""
    row = run_config(_tiny("fp32", "compile"), isolated=False)
    assert row["honest"] is True and row["execution"] == "eager"
    assert row["kernels_per_step"] is None and math.isfinite(row["eval_loss"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_graph_runners_replay_and_ours_graph_trains_like_ours(precision: str) -> None:
    """hand-graph and ours-graph run from CUDA graphs; ours-graph's weights equal ours'."""
    config = replace(_tiny(precision, "ours", device="cuda"), warmup_steps=4, timed_steps=6)
    eager = run_config(config, isolated=False)
    graphed = run_config(replace(config, runner="ours-graph"), isolated=False)
    anchor = run_config(replace(config, runner="hand-graph"), isolated=False)
    assert graphed["execution"] == anchor["execution"] == "cuda_graph"
    assert eager["execution"] == "eager"
    assert graphed["eval_loss"] == eager["eval_loss"]  # the same training, bit for bit
    assert graphed["host_syncs_per_step"] == 0 and anchor["host_syncs_per_step"] == 0
    assert graphed["kernels_per_step"] is not None and math.isfinite(anchor["eval_loss"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_ours_graph_compile_replays_the_compiled_step_and_trains_like_ours_graph() -> None:
    """ours-graph-compile runs as cuda_graph_compiled without host syncs, and its eval loss
    tracks ours-graph's (compiled kernels round differently: a tolerance, not equality)."""
    config = replace(_tiny("bf16", "ours-graph", device="cuda"), warmup_steps=4, timed_steps=6)
    graphed = run_config(config, isolated=False)
    compiled = run_config(replace(config, runner="ours-graph-compile"), isolated=False)
    assert compiled["execution"] == "cuda_graph_compiled" and compiled["honest"] is True
    assert compiled["host_syncs_per_step"] == 0
    assert compiled["eval_loss"] == pytest.approx(graphed["eval_loss"], rel=0.02)


def test_ours_row_says_eager_when_its_capture_fell_back_during_the_steps() -> None:
    """A row's execution is how its steps really ran: a trainer that fell back to eager
    after a failed capture makes the row say eager, with the reason in its note."""

    class FallingBack:
        def __init__(self) -> None:
            self.execution = ResolvedExecution("on", "cuda_graph", "captured")

        def step(self, batches: Any, loss_fn: Any, num_samples: int) -> None:
            self.execution = ResolvedExecution(
                "on", "eager", "the capture at step 4 raised: x", fallback="capture_failed"
            )

    runner = OursRunner()
    runner.trainer, runner._loss_fn, runner._n = FallingBack(), None, 1  # type: ignore[assignment]
    runner.execution, runner.note = "cuda_graph", "policy used fp32"
    runner.step((torch.zeros(1),))  # type: ignore[arg-type]
    assert runner.execution == "eager"
    assert runner.note == "policy used fp32; then eager: the capture at step 4 raised: x"


def test_a_loaded_machine_is_named_in_one_line_and_an_idle_one_is_not() -> None:
    """The load warning names the 1-minute load average and the cores once the load passes
    half the cores, and says nothing below that."""
    line = load_warning(1.6, 2)
    assert line is not None and "\n" not in line
    assert "load average 1.60 on 2 cores" in line
    assert load_warning(0.9, 2) is None
    assert load_warning(3.9, 8) is None and load_warning(4.1, 8) is not None


def test_without_out_dir_each_run_writes_a_fresh_folder_and_never_the_committed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two plain `bench` runs write into two new bench-runs/<UTC time> folders of the working
    directory, none into benchmarks/results; --out-dir writes where it says."""
    monkeypatch.chdir(tmp_path)
    tiny = ["bench", "--device", "cpu", "--tiny", "--sizes", "default", "--runners", "hand",
            "--precisions", "fp32", "--batch-size", "16", "--warmup", "0", "--steps", "1",
            "--in-process"]  # fmt: skip
    assert cli_main(tiny) == 0
    assert cli_main(tiny) == 0
    runs = sorted((tmp_path / "bench-runs").iterdir())
    assert len(runs) == 2
    for run in runs:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d{6}Z(-\d+)?", run.name), run.name
        (written,) = run.glob("*.csv")
        assert written.name.startswith("bench_cpu-") and written.with_suffix(".png").exists()
    assert not (tmp_path / "benchmarks").exists()
    assert f"results will go to {Path('bench-runs') / runs[0].name}" in capsys.readouterr().out
    assert cli_main([*tiny, "--out-dir", "benchmarks/results"]) == 0
    assert len(list((tmp_path / "benchmarks" / "results").glob("bench_cpu-*_tiny.csv"))) == 1


def test_fresh_folders_of_the_same_second_do_not_collide(tmp_path: Path) -> None:
    """Two runs started in the same second get the UTC time, then the UTC time with -2."""
    now = datetime.datetime(2026, 11, 23, 13, 5, 9, tzinfo=datetime.UTC)
    first, second = fresh_out_dir(tmp_path, now), fresh_out_dir(tmp_path, now)
    assert (first.name, second.name) == ("2026-11-23T130509Z", "2026-11-23T130509Z-2")
    assert first.is_dir() and second.is_dir()


def test_bench_without_matplotlib_says_what_to_install_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No matplotlib: one line naming the extra, exit 2, and no configuration measured."""
    import genesis_fp16.bench.run as bench_run

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # find_spec then finds nothing
    monkeypatch.setattr(bench_run, "run_benchmark", lambda *a, **k: pytest.fail("it started"))
    assert cli_main(["bench", "--tiny", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib is not installed" in err[0] and "[bench]" in err[0]


def test_a_framework_that_is_not_installed_is_named_as_such(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer whose library is missing: 'not installed (accelerate)', not 'ran none, 0.0 ms'."""
    import genesis_fp16.bench.run as bench_run

    def missing(config: BenchConfig, isolated: bool) -> dict[str, Any]:
        raise ModuleNotFoundError("No module named 'accelerate'", name="accelerate")

    monkeypatch.setattr(bench_run, "run_config", missing)
    lines: list[str] = []
    bench_run._run_all([_tiny("fp32", "accelerate")], True, lines.append)
    assert len(lines) == 1 and "not installed (accelerate)" in lines[0], lines
    assert "ms/step" not in lines[0]
