"""LossScaler: GradScaler parity, floor/ceiling, hysteresis, unstable flag, state, skips."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16_infrastructure.training import LossScaler, PrecisionPolicy, ScalerConfig

# The dev extra has it; a bare GPU image may not, and this module also holds a gpu test.
pytest.importorskip("hypothesis")
from hypothesis import example, given, settings
from hypothesis import strategies as st

INF = float("inf")


def _one_step(
    scaler: Any, param: torch.nn.Parameter, opt: torch.optim.Optimizer, bad: bool
) -> None:
    """One scaled step of a 1-parameter problem; ``bad`` writes inf into the gradient."""
    loss = (param * 1e-3).sum()  # small gradients: huge scales stay finite
    scaler.scale(loss).backward()
    if bad:
        assert param.grad is not None
        param.grad[0] = INF
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)


def _trajectory(scaler: Any, pattern: Sequence[bool]) -> list[float]:
    """Scale after each step of ``pattern`` (True = overflow), driven through a real SGD."""
    param = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([param], lr=0.0)
    scales = []
    for bad in pattern:
        _one_step(scaler, param, opt, bad)
        scales.append(scaler.get_scale())
    return scales


factors = st.fixed_dictionaries(
    {
        "init_scale": st.sampled_from([2.0**k for k in (-3, 0, 4, 16, 100, 126)] + [3.7, 1e5]),
        "growth_factor": st.one_of(st.just(2.0), st.floats(1.01, 8.0)),
        "backoff_factor": st.one_of(st.just(0.5), st.floats(0.05, 0.99)),
        "growth_interval": st.integers(1, 5),
    }
)


@settings(max_examples=60, deadline=None)
@given(kwargs=factors, pattern=st.lists(st.booleans(), min_size=1, max_size=40))
@example(  # growth that would overflow float32: torch keeps the old scale
    kwargs={
        "init_scale": 2.0**126,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 1,
    },
    pattern=[False, False, False, True, False],
)
def test_trajectory_equals_gradscaler_without_floor_or_ceiling(
    kwargs: dict[str, Any], pattern: list[bool]
) -> None:
    """With min_scale=0, max_scale=inf the scale equals torch.amp.GradScaler's at every step."""
    ours = LossScaler("cpu", min_scale=0.0, max_scale=INF, **kwargs)
    theirs = torch.amp.GradScaler("cpu", **kwargs)
    assert _trajectory(ours, pattern) == _trajectory(theirs, pattern)


@settings(max_examples=60, deadline=None)
@given(
    init_exp=st.integers(0, 24),
    interval=st.integers(1, 3),
    pattern=st.lists(st.booleans(), min_size=1, max_size=60),
)
def test_default_floor_and_ceiling_clamp_the_gradscaler_trajectory(
    init_exp: int, interval: int, pattern: list[bool]
) -> None:
    """Default floor 1 / ceiling 2**24: torch's scales until they would leave, then clamped."""
    ours = _trajectory(
        LossScaler("cpu", init_scale=2.0**init_exp, growth_interval=interval), pattern
    )
    theirs = _trajectory(
        torch.amp.GradScaler("cpu", init_scale=2.0**init_exp, growth_interval=interval), pattern
    )
    for mine, torch_scale in zip(ours, theirs, strict=True):
        assert 1.0 <= mine <= 2.0**24
        if not 1.0 <= torch_scale <= 2.0**24:
            assert mine == min(max(torch_scale, 1.0), 2.0**24)
            break
        assert mine == torch_scale


@settings(max_examples=60, deadline=None)
@given(
    kwargs=st.fixed_dictionaries(
        {
            "init_scale": st.sampled_from([1.0, 2.0, 4.0, 3.7, 2.0**20, 2.0**24]),
            "growth_factor": st.one_of(st.just(2.0), st.floats(1.01, 8.0)),
            "backoff_factor": st.one_of(st.just(0.5), st.floats(0.05, 0.99)),
            "growth_interval": st.integers(1, 4),
            "min_scale": st.sampled_from([0.0, 1.0, 2.0]),
            "unstable_after": st.integers(1, 4),
        }
    ),
    flags=st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=60),
)
def test_fused_scale_update_equals_the_general_one(
    kwargs: dict[str, Any], flags: list[float]
) -> None:
    """hysteresis=1 takes torch's one-kernel update: every counter equals the general path's."""
    kwargs["max_scale"] = max(2.0**24, kwargs["init_scale"])
    kwargs["min_scale"] = min(kwargs["min_scale"], kwargs["init_scale"])  # a valid config
    fused, general = LossScaler("cpu", **kwargs), LossScaler("cpu", **kwargs)
    for flag in flags:
        found_inf = torch.tensor(flag)
        fused._advance(found_inf, fused=True)
        general._advance(found_inf, fused=False)
        assert fused.state_dict() == general.state_dict()


def test_ceiling_holds_and_floor_holds() -> None:
    """Growth stops at max_scale and backoff stops at min_scale, exactly at those values."""
    up = LossScaler("cpu", init_scale=2.0**23, growth_interval=1)
    assert _trajectory(up, [False] * 3) == [2.0**24, 2.0**24, 2.0**24]
    down = LossScaler("cpu", init_scale=3.0, min_scale=1.0)
    assert _trajectory(down, [True] * 3) == [1.5, 1.0, 1.0]


def test_hysteresis_tolerates_isolated_overflows_and_refills_after_a_clean_step() -> None:
    """hysteresis=2: first overflow in a row tolerated, later ones back off; clean step refills."""
    scaler = LossScaler("cpu", init_scale=1024.0, growth_interval=100, hysteresis=2)
    pattern = [True, False, True, True, True, False, True]
    assert _trajectory(scaler, pattern) == [1024.0, 1024.0, 1024.0, 512.0, 256.0, 256.0, 256.0]
    assert scaler.overflow_count_tensor().item() == 5


def test_tolerated_overflow_still_skips_the_step_and_restarts_growth() -> None:
    """An overflow absorbed by hysteresis still skips the step and restarts the growth interval."""
    scaler = LossScaler("cpu", init_scale=8.0, growth_interval=2, hysteresis=3)
    param = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([param], lr=0.1)
    _one_step(scaler, param, opt, bad=False)  # tracker 1
    before = param.detach().clone()
    _one_step(scaler, param, opt, bad=True)  # tolerated: skipped, tracker back to 0
    assert torch.equal(param.detach(), before)
    assert scaler.get_scale() == 8.0
    _one_step(scaler, param, opt, bad=False)
    assert scaler.get_scale() == 8.0  # growth needs two clean steps after the overflow
    _one_step(scaler, param, opt, bad=False)
    assert scaler.get_scale() == 16.0


def test_unstable_turns_true_after_unstable_after_overflows_at_the_floor() -> None:
    """At min_scale, unstable turns true on the N-th consecutive overflow and stays true."""
    scaler = LossScaler("cpu", init_scale=4.0, min_scale=1.0, unstable_after=3)
    param = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([param], lr=0.1)
    # 4 -> 2 -> 1 (not yet at the floor when they overflowed), then 2 at the floor, a clean step.
    for bad in [True, True, True, True, False]:
        _one_step(scaler, param, opt, bad)
    assert scaler.get_scale() == 1.0 and not scaler.unstable
    for _ in range(2):
        _one_step(scaler, param, opt, bad=True)
        assert not scaler.unstable
    _one_step(scaler, param, opt, bad=True)
    assert scaler.unstable and bool(scaler.unstable_tensor())
    _one_step(scaler, param, opt, bad=False)
    assert scaler.unstable


@settings(max_examples=60, deadline=None)
@given(
    kwargs=st.fixed_dictionaries(
        {
            "init_scale": st.sampled_from([1.0, 2.0, 4.0, 3.7]),
            "backoff_factor": st.sampled_from([0.5, 0.05]),
            "growth_interval": st.integers(1, 4),
            "min_scale": st.sampled_from([0.0, 1.0, 1.5]),
            "unstable_after": st.integers(1, 4),
            "hysteresis": st.integers(1, 2),
        }
    ),
    flags=st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=60),
)
@example(  # a floor of 0, reached by underflow (on the 35th overflow): clean steps there
    kwargs={  # do not count, overflows there do
        "init_scale": 1.0,
        "backoff_factor": 0.05,
        "growth_interval": 4,
        "min_scale": 0.0,
        "unstable_after": 3,
        "hysteresis": 1,
    },
    flags=[1.0] * 35 + [0.0] * 4 + [1.0] * 4,
)
def test_unstable_and_floor_overflows_follow_the_rule_step_by_step(
    kwargs: dict[str, Any], flags: list[float]
) -> None:
    """Overflows at the floor (scale <= min_scale before the step) count in a row; unstable from
    the unstable_after-th on, for good; floor_overflows is the run modulo unstable_after."""
    kwargs["min_scale"] = min(kwargs["min_scale"], kwargs["init_scale"])
    scaler = LossScaler("cpu", **kwargs)
    floor = float(torch.tensor(kwargs["min_scale"], dtype=torch.float32))
    run, unstable = 0, False
    for flag in flags:
        at_floor = scaler.get_scale() <= floor
        scaler._advance(torch.tensor(flag), fused=kwargs["hysteresis"] == 1)
        run = run + 1 if flag and at_floor else 0
        unstable = unstable or run >= kwargs["unstable_after"]
        state = scaler.state_dict()
        assert state["unstable"] is unstable
        assert state["floor_overflows"] == run % kwargs["unstable_after"]


def test_two_overflowing_optimizers_make_one_flag_and_count_once() -> None:
    """Two optimizers that both overflow: the step's flag is 1.0 (a max, not a sum), one count."""
    scaler = LossScaler("cpu", init_scale=1.0, min_scale=1.0, unstable_after=1)
    params = [torch.nn.Parameter(torch.ones(2)) for _ in range(2)]
    opts = [torch.optim.SGD([p], lr=0.1) for p in params]
    scaler.scale(sum(p.sum() for p in params)).backward()
    for p, opt in zip(params, opts, strict=True):
        assert p.grad is not None
        p.grad[0] = INF
        scaler.step(opt)
    assert float(scaler.found_inf_tensor()) == 1.0
    scaler.update()
    assert float(scaler.found_inf_tensor()) == 1.0
    assert int(scaler.overflow_count_tensor()) == 1 and scaler.unstable


def test_two_optimizers_keep_the_combined_flag_in_a_tensor_made_before_the_step() -> None:
    """update() writes two optimizers' flag into the scaler's own tensor, in place: a flag
    made inside a step and kept would outlive a captured step's memory (cuda_graph.py)."""
    scaler = LossScaler("cpu", init_scale=4.0)
    params = [torch.nn.Parameter(torch.ones(2)) for _ in range(2)]
    opts = [torch.optim.SGD([p], lr=0.1) for p in params]
    kept, flags = [], []
    for overflow in (True, False, True):
        scaler.scale(sum(p.sum() for p in params)).backward()
        if overflow:
            assert params[1].grad is not None
            params[1].grad[0] = INF
        for opt in opts:
            scaler.step(opt)
            opt.zero_grad(set_to_none=True)
        scaler.update()
        kept.append(scaler.found_inf_tensor().data_ptr())
        flags.append(float(scaler.found_inf_tensor()))
    assert flags == [1.0, 0.0, 1.0]
    assert len(set(kept)) == 1  # the same storage every step: nothing made per step is kept
    assert int(scaler.overflow_count_tensor()) == 2 and scaler.state_dict()["last_found_inf"] == 1.0


def test_a_state_saved_before_the_fused_unstable_count_loads_and_continues() -> None:
    """An older state (int counters, a floor run counted past unstable_after) loads and runs on."""
    old = {
        "version": 1,
        "scale": 1.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 3,
        "_growth_tracker": 0,
        "min_scale": 1.0,
        "max_scale": 2.0**24,
        "hysteresis": 1,
        "unstable_after": 3,
        "init_scale": 4.0,
        "enabled": True,
        "hysteresis_left": 1,
        "floor_overflows": 7,
        "unstable": True,
        "overflow_steps_total": 9,
        "last_found_inf": 1.0,
    }
    scaler = LossScaler("cpu")
    scaler.load_state_dict(old)
    state = scaler.state_dict()
    assert state == {**old, "floor_overflows": 7 % 3}
    assert float(scaler.found_inf_tensor()) == 1.0
    assert _trajectory(scaler, [True, False, False, False]) == [1.0, 1.0, 1.0, 2.0]
    assert scaler.unstable and int(scaler.overflow_count_tensor()) == 10


def test_state_dict_round_trip_continues_bit_exactly() -> None:
    """A scaler restored via torch.save/load(weights_only=True) continues identically."""
    config = ScalerConfig(
        init_scale=3.3,
        growth_factor=1.7,
        backoff_factor=0.3,
        growth_interval=3,
        hysteresis=2,
        unstable_after=2,
        min_scale=0.5,
    )
    original = LossScaler.from_config("cpu", config)
    _trajectory(original, [False, True, False, False, True, True, True, False, True])
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)
    restored = LossScaler("cpu")
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert restored.config == original.config
    assert restored.state_dict() == original.state_dict()
    tail = [True, True, True, False, False, False, False, True]
    assert _trajectory(restored, tail) == _trajectory(original, tail)
    assert restored.state_dict() == original.state_dict()


def test_disabled_scaler_passes_through_and_still_has_a_state_dict() -> None:
    """A disabled scaler passes the loss through; its state_dict loads into an enabled one."""
    scaler = LossScaler("cpu", enabled=False)
    loss = torch.tensor(2.5)
    assert scaler.scale(loss) is loss
    assert scaler.get_scale() == 1.0 and not scaler.is_enabled()
    state = scaler.state_dict()
    assert state["scale"] == 65536.0 and state["enabled"] is False
    enabled = LossScaler("cpu", init_scale=8.0)
    enabled.load_state_dict(state)
    assert enabled.is_enabled() and enabled.get_scale() == 65536.0


def test_gradscaler_state_dict_loads() -> None:
    """A torch.amp.GradScaler state dict loads, keeping its scale and growth tracker."""
    theirs = torch.amp.GradScaler("cpu", init_scale=2.0**30, growth_interval=7)
    _trajectory(theirs, [False, False])
    ours = LossScaler("cpu")
    ours.load_state_dict(theirs.state_dict())
    assert ours.get_scale() == 2.0**30
    assert ours.state_dict()["_growth_tracker"] == 2
    assert ours.config.growth_interval == 7


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def _fp16_training(
    make_opt: Callable[[torch.nn.Module], torch.optim.Optimizer], bad_steps: set[int], steps: int
) -> tuple[list[bool], list[float], list[int]]:
    """Real fp16 CPU autocast training; a gradient hook writes inf on ``bad_steps``.

    Returns, per step: whether the parameters changed, the scale after update, overflow count.
    """
    policy = PrecisionPolicy.create(
        "fp16", "cpu", ScalerConfig(init_scale=1024.0, growth_interval=3)
    )
    model = _Mlp()
    policy.check_model(model)
    opt = make_opt(model)
    step = {"now": 0}
    first = next(model.parameters())  # the first Linear's weight
    first.register_hook(lambda g: g.fill_(INF) if step["now"] in bad_steps else g)
    generator = torch.Generator().manual_seed(1)
    changed, scales, counts = [], [], []
    for i in range(steps):
        step["now"] = i
        x = torch.randn(4, 8, generator=generator)
        with policy.autocast():
            pred = model(x)
        assert pred.dtype == torch.float16
        loss = (pred.float() - 1.0).pow(2).mean()
        before = [p.detach().clone() for p in model.parameters()]
        policy.scaler.scale(loss).backward()
        policy.scaler.step(opt)
        policy.scaler.update()
        opt.zero_grad(set_to_none=True)
        after = list(model.parameters())
        changed.append(
            any(not torch.equal(b, a.detach()) for b, a in zip(before, after, strict=True))
        )
        scales.append(policy.scaler.get_scale())
        counts.append(int(policy.scaler.overflow_count_tensor()))
    return changed, scales, counts


@pytest.mark.parametrize(
    "make_opt",
    [
        pytest.param(lambda m: torch.optim.SGD(m.parameters(), lr=0.01), id="sgd"),
        pytest.param(lambda m: torch.optim.AdamW(m.parameters(), lr=0.01), id="adamw"),
        pytest.param(
            lambda m: torch.optim.AdamW(m.parameters(), lr=0.01, fused=True), id="adamw-fused"
        ),
        pytest.param(
            lambda m: torch.optim.SGD(m.parameters(), lr=0.01, fused=True), id="sgd-fused"
        ),
    ],
)
def test_injected_inf_in_real_fp16_step_skips_and_backs_off(
    make_opt: Callable[[torch.nn.Module], torch.optim.Optimizer],
) -> None:
    """fp16 CPU training: an inf gradient leaves every parameter untouched and halves the scale."""
    changed, scales, counts = _fp16_training(make_opt, bad_steps={1, 5, 6}, steps=9)
    assert changed == [True, False, True, True, True, False, False, True, True]
    assert scales == [1024.0, 512.0, 512.0, 512.0, 1024.0, 512.0, 256.0, 256.0, 256.0]
    assert counts == [0, 1, 1, 1, 1, 2, 3, 3, 3]


def test_fused_adamw_skip_matches_unfused_trajectory() -> None:
    """The fused (device-side skip) path trains to the same parameters as the unfused path."""

    def train(fused: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        p = torch.nn.Parameter(torch.randn(5))
        opt = torch.optim.AdamW([p], lr=0.1, fused=fused)
        scaler = LossScaler("cpu", init_scale=4.0, growth_interval=2)
        for i in range(6):
            _one_step(scaler, p, opt, bad=i in (2, 3))
        return [p.detach().clone(), torch.tensor(scaler.get_scale())]

    fused, plain = train(True), train(False)
    assert torch.equal(fused[1], plain[1])
    torch.testing.assert_close(fused[0], plain[0])


@contextmanager
def _no_host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make Tensor.item/__bool__/tolist raise, so any host read inside the block fails the test."""

    def refuse(*_: object) -> None:
        raise AssertionError("host read of a tensor inside a per-step scaler method")

    with monkeypatch.context() as patch:
        for name in ("item", "__bool__", "tolist", "__float__", "__int__"):
            patch.setattr(torch.Tensor, name, refuse)
        yield


def test_fused_path_scale_unscale_step_update_never_read_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With fused AdamW, scale/unscale_/step/update make no host read, overflowing or not."""
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([p], lr=0.1, fused=True)
    scaler = LossScaler("cpu", init_scale=8.0, growth_interval=1)
    for bad, unscale_first in [(False, False), (True, False), (False, True), (True, True)]:
        loss = (p * 2.0).sum()
        with _no_host_reads(monkeypatch):
            scaled = scaler.scale(loss)
        scaled.backward()
        if bad:
            assert p.grad is not None
            p.grad[1] = INF
        before = p.detach().clone()
        with _no_host_reads(monkeypatch):
            if unscale_first:
                scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
            found = scaler.found_inf_tensor()
        assert float(found) == float(bad)
        assert torch.equal(p.detach(), before) == bad
        opt.zero_grad()
    assert int(scaler.overflow_count_tensor()) == 2


def test_unscale_gives_true_gradients_for_clipping() -> None:
    """After unscale_, gradients equal the unscaled ones (what clipping must see)."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    scaler = LossScaler("cpu", init_scale=1024.0)
    opt = torch.optim.SGD([p], lr=0.1)
    scaler.scale((p * torch.tensor([3.0, 5.0])).sum()).backward()
    assert p.grad is not None and torch.equal(p.grad, torch.tensor([3072.0, 5120.0]))
    scaler.unscale_(opt)
    assert torch.equal(p.grad, torch.tensor([3.0, 5.0]))


def test_sparse_gradients_are_unscaled_in_place() -> None:
    """A sparse gradient with a repeated index is coalesced and unscaled on the parameter."""
    emb = torch.nn.Embedding(4, 2, sparse=True)
    scaler = LossScaler("cpu", init_scale=256.0)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    scaler.scale(emb(torch.tensor([1, 1, 3])).sum()).backward()
    scaler.unscale_(opt)
    assert emb.weight.grad is not None
    expected = torch.tensor([[0.0, 0.0], [2.0, 2.0], [0.0, 0.0], [1.0, 1.0]])
    assert torch.equal(emb.weight.grad.to_dense(), expected)


def test_misuse_raises_clear_errors() -> None:
    """Calling the per-step methods out of order, or on fp16 grads, names the mistake."""
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = LossScaler("cpu")
    with pytest.raises(RuntimeError, match="no inf checks"):
        scaler.update()
    scaler.scale(p.sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="already called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    half = torch.nn.Parameter(torch.ones(2, dtype=torch.float16))
    half.grad = torch.ones(2, dtype=torch.float16)
    with pytest.raises(ValueError, match="FP32 master weights"):
        LossScaler("cpu").unscale_(torch.optim.SGD([half], lr=0.1))
    with pytest.raises(ValueError, match="not a loss-scaler state dict"):
        scaler.load_state_dict({})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"growth_factor": 1.0}, "growth_factor=1.0"),
        ({"backoff_factor": 1.5}, "backoff_factor=1.5"),
        ({"growth_interval": 0}, "growth_interval=0"),
        ({"init_scale": 0.5}, "init_scale=0.5"),
        ({"hysteresis": 0}, "hysteresis=0"),
        ({"min_scale": 4.0, "max_scale": 2.0, "init_scale": 3.0}, "max_scale=2.0"),
    ],
)
def test_invalid_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    """Bad scaler settings fail at construction with the value named."""
    with pytest.raises(ValueError, match=message):
        ScalerConfig(**kwargs)


def test_scale_accepts_lists_and_tuples() -> None:
    """scale() scales every tensor of a list or tuple and keeps the container type."""
    scaler = LossScaler("cpu", init_scale=4.0)
    out = scaler.scale((torch.tensor(1.0), [torch.tensor(2.0)]))
    assert isinstance(out, tuple) and isinstance(out[1], list)
    assert float(out[0]) == 4.0 and float(out[1][0]) == 8.0
    assert not math.isnan(scaler.get_scale())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_steady_state_has_no_host_sync() -> None:
    """CUDA + fused AdamW: scale/unscale_/step/update run under sync-debug mode 'error'."""
    model = torch.nn.Linear(64, 64).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    scaler = LossScaler("cuda", init_scale=2.0**16, growth_interval=3)
    x = torch.randn(32, 64, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(10):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert scaler.get_scale() > 0


def _distributed_rank(rank: int, init_file: str, out_dir: str) -> None:
    """One gloo rank: only rank 0 sees an inf gradient; records its step and scale."""
    import json

    import torch.distributed as dist

    torch.set_num_threads(1)  # a forked child must not reuse the parent's thread pool
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        p = torch.nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([p], lr=0.1)
        scaler = LossScaler("cpu", init_scale=8.0)
        p.grad = scaler.scale(torch.full((2,), 1e-3))
        if rank == 0:
            p.grad[0] = INF
        scaler.step(opt)
        scaler.update()
        stepped = not torch.equal(p.detach(), torch.ones(2))
        result = {"stepped": stepped, "scale": scaler.get_scale()}
        Path(out_dir, f"{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.distributed
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed missing")
def test_all_ranks_skip_together_when_one_overflows(tmp_path: Path) -> None:
    """Two gloo ranks: an overflow on rank 0 makes rank 1 skip and back off too (MAX all-reduce)."""
    import json

    import torch.multiprocessing as mp

    args = (str(tmp_path / "init"), str(tmp_path))
    # The first optimizer of a process imports torch's compiler stack (seconds): pay that
    # once here rather than in each forked child.
    torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    # fork: no CUDA in the parent here, and it saves re-importing torch in each child.
    mp.start_processes(_distributed_rank, args=args, nprocs=2, join=True, start_method="fork")
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    assert results == [{"stepped": False, "scale": 4.0}] * 2
