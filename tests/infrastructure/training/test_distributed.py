"""fit() under torch.distributed: two gloo ranks on the CPU, forked from the test process."""

from __future__ import annotations

import faulthandler
import math
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from genesis_fp16_infrastructure.training import (
    FitOptions,
    GuardConfig,
    ScalerConfig,
    StepTuning,
    fit,
)
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint
from genesis_fp16_infrastructure.training.distributed import agreed_stop, shard_step, slice_batch

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed missing")

SAMPLES = 48
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class _Regression:
    """A small MLP regression task whose batches are a pure function of (epoch, seed)."""

    def __init__(self, batch_size: int) -> None:
        generator = torch.Generator().manual_seed(1234)
        self.x = torch.randn(SAMPLES, 8, generator=generator)
        self.y = self.x @ torch.randn(8, 1, generator=generator) + 0.1
        self.batch_size = batch_size

    def build_model(self) -> nn.Module:
        return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        return [torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)]

    def build_schedulers(self, optimizers: Sequence[Optimizer]) -> Sequence[LRScheduler]:
        return ()

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Any, int]]:
        order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(seed * 97 + epoch))
        for start in range(0, SAMPLES, self.batch_size):
            index = order[start : start + self.batch_size]
            yield (self.x[index], self.y[index]), len(index)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(model(x).float(), y)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"loss": float(self.loss(model, (self.x, self.y)))}

    def extra_state(self) -> dict[str, Any]:
        return {}


class _InjectOnRank1(_Regression):
    """After DDP's gradient all-reduce, rank 1 alone sees an inf gradient at its 3rd backward."""

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        assert isinstance(model, nn.parallel.DistributedDataParallel)
        model.register_comm_hook({"calls": 0}, _allreduce_then_inject)
        return super().build_optimizers(model)


# No annotations on bucket and return: DDP compares them to dist.GradBucket and Future
# objects, and `from __future__ import annotations` makes them strings.
def _allreduce_then_inject(state: dict[str, int], bucket):  # type: ignore[no-untyped-def]
    state["calls"] += 1
    inject = dist.get_rank() == 1 and state["calls"] == 3
    buffer = bucket.buffer().div_(dist.get_world_size())
    future = dist.all_reduce(buffer, async_op=True).get_future()

    def after(done: torch.futures.Future[Any]) -> torch.Tensor:
        out: torch.Tensor = done.value()[0]
        if inject:
            out[0] = math.inf
        return out

    return future.then(after)


class _CountedReductions(_Regression):
    """Counts the gradient reductions: DDP's all-reduce rounds (a comm hook that averages,
    as DDP does) or FSDP2's reduce-scatters (its ``foreach_reduce``), in ``self.calls``."""

    def __init__(self, batch_size: int) -> None:
        super().__init__(batch_size)
        self.calls = 0

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model.register_comm_hook(self, _counted_allreduce)
        return super().build_optimizers(model)


def _counted_allreduce(task: _CountedReductions, bucket):  # type: ignore[no-untyped-def]
    task.calls += 1
    buffer = bucket.buffer().div_(dist.get_world_size())
    future = dist.all_reduce(buffer, async_op=True).get_future()
    return future.then(lambda done: done.value()[0])


@contextmanager
def _fsdp_reductions_counted(task: _CountedReductions) -> Iterator[None]:
    """FSDP2's per-backward reduction (``foreach_reduce``, torch 2.6+ layout) counted on
    ``task`` while inside; this rank's process only."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    original = _fsdp_param_group.foreach_reduce

    def counted(*args: Any, **kwargs: Any) -> Any:
        task.calls += 1
        return original(*args, **kwargs)

    _fsdp_param_group.foreach_reduce = counted
    try:
        yield
    finally:
        _fsdp_param_group.foreach_reduce = original


class _NanOnRank1(_Regression):
    """Rank 1 alone sees NaN losses from its ``fault_from``-th loss in ``fault_in`` on."""

    def __init__(self, batch_size: int, fault_from: int, fault_in: torch.dtype) -> None:
        super().__init__(batch_size)
        self.fault_from, self.fault_in, self.calls = fault_from, fault_in, 0

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        value = super().loss(model, batch)
        autocast = torch.is_autocast_enabled("cpu")
        if not (autocast and torch.get_autocast_dtype("cpu") == self.fault_in):
            return value
        self.calls += 1
        if dist.get_rank() == 1 and self.calls >= self.fault_from:
            return value * math.nan
        return value


def _params(model_state: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.flatten().float() for t in model_state.values()])


def _run_fit(
    batch_size: int, checkpoint_dir: Path, steps: int, precision: str, resume: bool = False
) -> dict[str, Any]:
    result = fit(
        _Regression(batch_size),
        FitOptions(
            precision=precision,
            steps=steps,
            checkpoint_dir=checkpoint_dir,
            resume=resume,
            log_interval=1000,
        ),
    )
    assert result.checkpoint is not None
    state = load_checkpoint(result.checkpoint)
    return {"params": _params(state[keys.MODEL]), "summary": result.summary, "state": state}


# ---------------------------------------------------------------------- forked ranks


def _rank_main(rank: int, init: str, out: str, job: str, args: tuple[Any, ...]) -> None:
    # A rank killed by a signal (a crash in native code) prints every thread's Python stack,
    # and its phase file says how far it got, so a failure names where it died.
    faulthandler.enable(all_threads=True)
    phases = Path(out) / f"rank{rank}.phase"
    phases.write_text("started\n")
    # A short timeout: ranks that disagree fail in a minute instead of hanging for 30.
    dist.init_process_group(
        "gloo", init_method=f"file://{init}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    try:
        result = _JOBS[job](*args)
        torch.save(result, Path(out) / f"rank{rank}.pt")
        _phase(phases, "saved its result")
        # Both ranks done with every collective before either tears the group down: a rank
        # that exits while its peer is still in a collective can abort the peer.
        dist.barrier()
        _phase(phases, "passed the final barrier")
    finally:
        dist.destroy_process_group()
    _phase(phases, "destroyed the process group")


def _phase(path: Path, text: str) -> None:
    with path.open("a") as handle:
        handle.write(text + "\n")


def _job_fit(batch_size: int, directory: str, steps: int, precision: str, resume: bool) -> Any:
    found = _run_fit(batch_size, Path(directory), steps, precision, resume)
    summary = found["summary"]
    return {
        "params": found["params"],
        "skipped": summary.skipped_steps,
        "scale": summary.loss_scale,
        "step": summary.step,
    }


def _job_inject(directory: str) -> Any:
    result = fit(
        _InjectOnRank1(8),
        FitOptions(
            precision="fp16",
            steps=5,
            checkpoint_dir=Path(directory),
            log_interval=1000,
            scaler=ScalerConfig(init_scale=1024.0),  # low enough that nothing else overflows
        ),
    )
    assert result.checkpoint is not None
    state = load_checkpoint(result.checkpoint)
    return {
        "params": _params(state[keys.MODEL]),
        # The checkpoint is rank 0's; each rank's own weights show in its own evaluation.
        "eval": result.eval["loss"],
        "skipped": result.summary.skipped_steps,
        "scale": result.summary.loss_scale,
    }


def _job_fsdp(directory: str, precision: str) -> Any:
    result = fit(
        _Regression(16),
        FitOptions(
            precision=precision,
            steps=4,
            fsdp=True,
            checkpoint_dir=Path(directory) / "fsdp",
            log_interval=1000,
        ),
    )
    return {"eval": result.eval["loss"], "step": result.summary.step}


def _job_guard(directory: str, precision: str, fsdp: bool) -> Any:
    # Only the non-finite-loss trigger: the overflows the NaN causes are agreed anyway
    # (the scaler's MAX), the NaN losses themselves are seen by rank 1 alone.
    # bf16_needs_native=False: fp16 demotes to bf16 on any CPU, with AVX512-BF16 or not.
    guard = GuardConfig(check_interval=5, overflow_rate_limit=None, bf16_needs_native=False)
    seen: dict[str, Any] = {}
    result = fit(
        _NanOnRank1(16, fault_from=12, fault_in=_DTYPES[precision]),
        FitOptions(
            precision=precision,
            steps=20,
            fsdp=fsdp,
            checkpoint_dir=Path(directory),
            log_interval=1000,
            guard=guard,
            step_hooks=[lambda trainer: seen.update(trainer=trainer)],
        ),
    )
    # This rank's own final weights (the checkpoint is rank 0's). Under FSDP each rank
    # holds a shard: the trainer's state gathers the full tensors.
    trainer_state = seen["trainer"].state_dict()
    params = _params(trainer_state[keys.MODEL])
    return {
        "demotions": [d.to_json() for d in result.demotions],
        "used": result.precision.used,
        "step": result.summary.step,
        "params": params,
    }


def _job_accumulate(directory: str, fsdp: bool) -> Any:
    """3 steps with 1 and with 2 micro-batches per step: the reductions each made, and the
    weights after the 2-micro-batch run (gathered from the shards under FSDP2)."""
    calls, seen = {}, {}
    for accum in (1, 2):
        task = _CountedReductions(8)
        options = FitOptions(
            precision="fp32",
            steps=3,
            fsdp=fsdp,
            trainer=StepTuning(grad_accum_steps=accum),
            checkpoint_dir=Path(directory) / f"accum{accum}",
            log_interval=1000,
            step_hooks=[lambda trainer: seen.update(trainer=trainer)],
        )
        with _fsdp_reductions_counted(task) if fsdp else nullcontext():
            fit(task, options)
        calls[accum] = task.calls
    return {"calls": calls, "params": _params(seen["trainer"].state_dict()[keys.MODEL])}


def _job_fsdp_resume(directory: str) -> Any:
    def run(folder: str, steps: int, resume: bool) -> tuple[int, str | None]:
        options = FitOptions(
            precision="fp32",
            steps=steps,
            fsdp=True,
            resume=resume,
            checkpoint_dir=Path(directory) / folder,
            log_interval=1000,
        )
        result = fit(_Regression(16), options)
        return result.summary.step, str(result.resumed_from) if result.resumed_from else None

    # "stopped": FSDP 3 + 3 resumed; "whole": 6 uninterrupted; "single": 3 steps written
    # by one process (before the ranks started), resumed here under FSDP for 3 more.
    runs = [("stopped", 3, False), ("stopped", 3, True), ("whole", 6, False)]
    return [run(*args) for args in [*runs, ("single", 3, True)]]


def _job_stop(flip_at: int, lags: Sequence[int]) -> list[int]:
    """The call at which agreed_stop first says stop, per lag, when rank 1 alone asks."""
    firsts = []
    for lag in lags:
        calls = 0

        def local() -> bool:
            nonlocal calls
            calls += 1
            return dist.get_rank() == 1 and calls >= flip_at

        agreed = agreed_stop(local, lag=lag)
        firsts.append(next((c for c in range(1, 20) if agreed()), -1))
    return firsts


def _job_abort(attempts: str, crashes: int) -> int:
    """Rank 1 aborts (SIGABRT) in its first ``crashes`` attempts, counted in ``attempts``."""
    counter = Path(attempts)
    if dist.get_rank() == 1:
        done = len(counter.read_text()) if counter.exists() else 0
        counter.write_text("x" * (done + 1))
        if done < crashes:
            os.abort()
    dist.barrier()
    return dist.get_rank()


_JOBS: dict[str, Callable[..., Any]] = {
    "fit": _job_fit,
    "stop": _job_stop,
    "inject": _job_inject,
    "fsdp": _job_fsdp,
    "guard": _job_guard,
    "fsdp_resume": _job_fsdp_resume,
    "accumulate": _job_accumulate,
    "abort": _job_abort,
}


def _two_ranks(tmp_path: Path, job: str, *args: Any) -> list[Any]:
    """Run ``job`` on two spawned gloo ranks and return each rank's result.

    A rank killed by a signal is a crash in native code, not a failed assertion: once, on
    CI, a rank of the FSDP2 guard job died of ``munmap_chunk(): invalid pointer`` (torch
    2.13 CPU, gloo), which about 135 local repeats did not reproduce (some with AVX2
    kernels forced, one under valgrind memcheck, which found no invalid free). Such a crash
    reruns the job once, from ``tmp_path`` as it was before the first attempt, with a
    warning that names the signal and how far each rank got; a second crash fails, and so
    does any error or disagreement raised in a rank.
    """
    before = tmp_path.parent / f"{tmp_path.name}.before-{job}"
    shutil.rmtree(before, ignore_errors=True)
    shutil.copytree(tmp_path, before)
    try:
        return _start_two_ranks(tmp_path, job, args)
    except _RankCrashed as crash:
        warnings.warn(f"{crash}; rerunning the job once", RuntimeWarning, stacklevel=2)
        shutil.rmtree(tmp_path)
        shutil.copytree(before, tmp_path)
        return _start_two_ranks(tmp_path, job, args)
    finally:
        shutil.rmtree(before, ignore_errors=True)


class _RankCrashed(AssertionError):
    """A rank died of a signal; the message says which and how far each rank got."""


def _start_two_ranks(tmp_path: Path, job: str, args: tuple[Any, ...]) -> list[Any]:
    out = tmp_path / f"out-{job}"
    out.mkdir(exist_ok=True)
    init = tmp_path / f"init-{job}-{len(list(tmp_path.iterdir()))}"
    # spawn, not fork: a parent that has already run a matmul holds an OpenMP thread pool,
    # and a forked child can hang on its first parallel region.
    try:
        mp.start_processes(
            _rank_main, (str(init), str(out), job, args), nprocs=2, start_method="spawn"
        )
    except mp.ProcessExitedException as exc:
        if exc.signal_name is None:
            raise
        reached = {rank: _last_phase(out / f"rank{rank}.phase") for rank in (0, 1)}
        raise _RankCrashed(f"{exc} (last phase per rank: {reached})") from exc
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]


def _last_phase(path: Path) -> str:
    return path.read_text().splitlines()[-1] if path.exists() else "not started"


# ---------------------------------------------------------------------- tests


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_rank_crash_reruns_once_and_a_second_crash_fails(tmp_path: Path) -> None:
    """The harness: one SIGABRT in a rank reruns the job with a warning; two fail it."""
    (tmp_path / "kept").write_text("before")
    attempts = tmp_path.parent / f"{tmp_path.name}-attempts"
    with pytest.warns(RuntimeWarning, match=r"SIGABRT.*'started'.*rerunning the job once"):
        assert _two_ranks(tmp_path, "abort", str(attempts), 1) == [0, 1]
    assert attempts.read_text() == "xx"
    assert (tmp_path / "kept").read_text() == "before"

    attempts.unlink()
    with pytest.warns(RuntimeWarning), pytest.raises(_RankCrashed, match="SIGABRT"):
        _two_ranks(tmp_path, "abort", str(attempts), 2)
    assert attempts.read_text() == "xx"


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_stop_asked_on_rank_1_alone_stops_both_ranks_at_the_same_call(tmp_path: Path) -> None:
    """agreed_stop: rank 1 asks at call 4; both ranks stop at call 4 + lag, for lag 0 and 2."""
    ranks = _two_ranks(tmp_path, "stop", 4, (0, 2))
    assert ranks == [[4, 6], [4, 6]]


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("precision", "tolerance"), [("fp32", 1e-5), ("bf16", 2e-2)])
def test_ddp_world_2_matches_one_process_with_twice_the_batch(
    tmp_path: Path, precision: str, tolerance: float
) -> None:
    """Two ranks with per-rank batch 8 end where one process with batch 16 ends."""
    single = _run_fit(16, tmp_path / "single", steps=6, precision=precision)
    ranks = _two_ranks(tmp_path, "fit", 16, str(tmp_path / "ddp"), 6, precision, False)
    assert torch.equal(ranks[0]["params"], ranks[1]["params"])
    start = _params(_Regression(16).build_model().state_dict())
    moved = (single["params"] - start).abs().max().item()
    assert moved > 1e-2  # the runs trained: equality is not just the initial weights
    diff = (ranks[0]["params"] - single["params"]).abs().max().item()
    assert diff <= tolerance * max(1.0, moved), f"{precision}: max |ddp - single| = {diff}"


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_inf_on_rank_1_only_makes_both_ranks_skip_and_back_off(tmp_path: Path) -> None:
    """fp16: an inf seen by rank 1 alone (after DDP's all-reduce) skips the step on both ranks."""
    ranks = _two_ranks(tmp_path, "inject", str(tmp_path / "ckpt"))
    assert [r["skipped"] for r in ranks] == [1, 1]
    assert [r["scale"] for r in ranks] == [512.0, 512.0]
    # Same weights on both ranks: their held-out losses agree bit for bit.
    assert ranks[0]["eval"] == ranks[1]["eval"]
    assert torch.isfinite(ranks[0]["params"]).all()


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_rank_checkpoint_resumes_in_one_process_and_back(tmp_path: Path) -> None:
    """3 steps on 2 ranks + 3 in one process (and the reverse) match 6 in one process."""
    reference = _run_fit(16, tmp_path / "ref", steps=6, precision="fp32")["params"]

    _two_ranks(tmp_path, "fit", 16, str(tmp_path / "a"), 3, "fp32", False)
    # writer.lock: rank 0's claim on the folder while it wrote (issue 37), left in place.
    names = sorted(f.name for f in (tmp_path / "a").iterdir() if f.name != "writer.lock")
    assert not [n for n in names if n.startswith(".tmp-")]  # no temp leftovers
    assert names[-3:] == [
        "ckpt-0000000003.pt",
        "ckpt-0000000003.pt.json",  # its summary (checkpoint_files.write_summary)
        "ckpt-0000000003.pt.sha256",
    ]
    written = load_checkpoint(tmp_path / "a" / "ckpt-0000000003.pt")  # weights_only=True
    assert len(written[keys.RNG_PER_RANK]) == 2
    assert not any(k.startswith("module.") for k in written[keys.MODEL])
    then_single = _run_fit(16, tmp_path / "a", steps=3, precision="fp32", resume=True)
    assert then_single["state"][keys.STEP] == 6
    assert torch.allclose(then_single["params"], reference, atol=1e-5)

    _run_fit(16, tmp_path / "b", steps=3, precision="fp32")
    ranks = _two_ranks(tmp_path, "fit", 16, str(tmp_path / "b"), 3, "fp32", True)
    assert [r["step"] for r in ranks] == [6, 6]
    assert torch.allclose(ranks[0]["params"], reference, atol=1e-5)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_fsdp2_fully_shard_trains_on_gloo(tmp_path: Path) -> None:
    """FSDP2 on two CPU ranks trains like one process; its checkpoint holds full plain tensors."""
    ranks = _two_ranks(tmp_path, "fsdp", str(tmp_path), "fp32")
    single = fit(_Regression(16), FitOptions(precision="fp32", steps=4, log_interval=1000))
    assert [r["step"] for r in ranks] == [4, 4]
    assert ranks[0]["eval"] == ranks[1]["eval"]
    assert ranks[0]["eval"] == pytest.approx(single.eval["loss"], rel=1e-4)
    state = load_checkpoint(tmp_path / "fsdp" / "ckpt-0000000004.pt")  # weights_only=True
    assert type(state[keys.MODEL]["0.weight"]) is torch.Tensor
    assert state[keys.MODEL]["0.weight"].shape == (32, 8)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_fsdp2_resumes_fsdp_and_single_process_checkpoints(tmp_path: Path) -> None:
    """FSDP 3 steps + resumed under FSDP 3 equals FSDP 6; a 1-process checkpoint resumes too."""
    _run_fit(16, tmp_path / "single", steps=3, precision="fp32")
    ranks = _two_ranks(tmp_path, "fsdp_resume", str(tmp_path))
    assert ranks[0] == ranks[1]
    runs = ranks[0]
    assert [step for step, _ in runs] == [3, 6, 6, 6]
    assert runs[1][1] == str(tmp_path / "stopped" / "ckpt-0000000003.pt")
    assert runs[3][1] == str(tmp_path / "single" / "ckpt-0000000003.pt")

    def params(folder: str) -> torch.Tensor:
        return _params(load_checkpoint(tmp_path / folder / "ckpt-0000000006.pt")[keys.MODEL])

    whole, start = params("whole"), _params(_Regression(16).build_model().state_dict())
    assert (whole - start).abs().max().item() > 1e-2  # it trained
    # Resuming without the optimizer's moments would miss by far more than this.
    assert torch.allclose(params("stopped"), whole, rtol=0, atol=1e-6)
    assert torch.allclose(params("single"), whole, rtol=0, atol=1e-5)
    state = load_checkpoint(tmp_path / "stopped" / "ckpt-0000000006.pt")
    assert state[keys.OPTIMIZER][0]["state"][0]["step"].item() == 6


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("precision", "fsdp", "demoted"), [("fp16", False, "bf16"), ("bf16", True, "fp32")]
)
def test_guard_decisions_agree_when_only_rank_1_sees_nan_losses(
    tmp_path: Path, precision: str, fsdp: bool, demoted: str
) -> None:
    """NaN losses on rank 1 alone: both ranks demote at one check, alike, to the same weights."""
    ranks = _two_ranks(tmp_path, "guard", str(tmp_path / "ckpt"), precision, fsdp)
    expected = {"from": precision, "to": demoted, "reason": "nonfinite_loss", "step": 15}
    for rank in ranks:
        assert [{k: d[k] for k in expected} for d in rank["demotions"]] == [expected]
        assert rank["demotions"][0]["rollback_step"] == 10
        assert (rank["used"], rank["step"]) == (demoted, 20)
    assert ranks[0]["demotions"] == ranks[1]["demotions"]
    assert torch.isfinite(ranks[0]["params"]).all()
    assert torch.equal(ranks[0]["params"], ranks[1]["params"])


# ---------------------------------------------------------------------- no process group


def test_slices_cover_every_sample_once() -> None:
    """Contiguous per-rank slices of odd-sized batches partition the batch, in order."""
    for n in (2, 3, 7, 16):
        for world in range(1, min(n, 5) + 1):
            parts = [slice_batch(torch.arange(n), n, r, world) for r in range(world)]
            assert torch.equal(torch.cat([p for p, _ in parts]), torch.arange(n))
            assert [rows for _, rows in parts] == [len(p) for p, _ in parts]
            assert max(r for _, r in parts) - min(r for _, r in parts) <= 1


def test_slices_keep_the_batch_structure() -> None:
    """Named tuples, dicts and lists are sliced field by field and keep their types."""
    batch = {"x": torch.arange(6).view(3, 2), "pair": (torch.arange(3), [torch.ones(3)])}
    part, rows = slice_batch(batch, 3, 1, 2)
    assert rows == 1
    assert torch.equal(part["x"], torch.tensor([[4, 5]]))
    assert isinstance(part["pair"], tuple) and isinstance(part["pair"][1], list)


def test_bad_batches_are_refused_with_the_reason() -> None:
    """Too few samples for the ranks, a tensor without a row per sample, or an odd type."""
    with pytest.raises(ValueError, match=r"1 sample.*2 ranks"):
        slice_batch(torch.ones(1), 1, 0, 2)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        slice_batch((torch.ones(3), torch.ones(2)), 3, 0, 2)
    with pytest.raises(TypeError, match="type str"):
        slice_batch("abc", 3, 0, 2)


def test_shard_step_is_a_pass_through_in_one_process() -> None:
    """Without a process group the trainer gets the batches and the loss unchanged."""

    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        return torch.zeros(())

    micro, loss_fn, n = shard_step([(torch.ones(4), 4), (torch.ones(2), 2)], loss)
    assert loss_fn is loss and n == 6 and len(micro) == 2


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("fsdp", [False, True], ids=["ddp", "fsdp2"])
def test_accumulated_micro_batches_reduce_once_per_step_and_match_one_process(
    tmp_path: Path, fsdp: bool
) -> None:
    """2 micro-batches per step on 2 ranks: as many gradient reductions as 1 micro-batch per
    step (no_sync on all but the last), and the weights of one process with the same batches."""
    ranks = _two_ranks(tmp_path, "accumulate", str(tmp_path), fsdp)
    single_task = _Regression(8)
    seen: dict[str, Any] = {}
    fit(
        single_task,
        FitOptions(
            precision="fp32",
            steps=3,
            trainer=StepTuning(grad_accum_steps=2),
            log_interval=1000,
            step_hooks=[lambda trainer: seen.update(trainer=trainer)],
        ),
    )
    single = _params(seen["trainer"].state_dict()[keys.MODEL])
    for rank in ranks:
        calls = rank["calls"]
        assert calls[1] >= 3, calls  # at least one reduction per step (a bucket, a group)
        assert calls[2] == calls[1], calls  # not one per micro-batch: that would be 2x
    assert torch.equal(ranks[0]["params"], ranks[1]["params"])
    start = _params(_Regression(8).build_model().state_dict())
    assert (single - start).abs().max().item() > 1e-2  # it trained
    assert torch.allclose(ranks[0]["params"], single, rtol=0, atol=1e-5)
