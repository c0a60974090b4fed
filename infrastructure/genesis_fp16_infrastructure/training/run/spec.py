"""The run's fields, declared once: :class:`RunSpec` and its :class:`RunCallbacks`.

Both ways into a run build on it: the plugin API's ``TrainRequest`` (what the daemon or
``genesis-fp16 train`` asks an agent for) and the library's ``FitOptions`` (what ``fit()``
takes) are ``RunSpec`` subclasses. A field both need (the precision asked for, the
device, the budget, the checkpoint time bound, the guard, FSDP; and, through
``StepSpec``, which the trainer's ``TrainerConfig`` inherits too, the log interval and
the execution settings) is declared once, and ``TrainRequest.fit_options`` copies them
without naming one. Importable without torch. Its JSON is the library's record codec's
(:mod:`~genesis_fp16_infrastructure.record_codec`: ``TrainRequest`` is a record), which
leaves the callbacks out (they cannot cross a process)::

    spec = RunSpec(precision=PrecisionRequest("auto", mode="measure"), steps=100)
    decode_record(RunSpec, json.loads(json.dumps(encode_record(spec))), "RunSpec") == spec
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from genesis_fp16_infrastructure.config_bounds import bounded
from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.record_codec import OMIT_NONE
from genesis_fp16_infrastructure.training.precision.guard_config import GuardConfig
from genesis_fp16_infrastructure.training.precision.precision_request import (
    PrecisionRequest,
    as_request,
)

# At run time, not only for the type checker: the codec resolves every field's annotation
# to its real type (typing.get_type_hints), and on_log's names this one.
from genesis_fp16_infrastructure.training.reports import TrainingSummary
from genesis_fp16_infrastructure.training.step_spec import StepSpec


def _never_stop() -> bool:
    return False


@dataclass(frozen=True, kw_only=True)
class RunSpec(StepSpec):
    """What one run is asked to do, whoever asks (torch-free, frozen, JSON by the record codec).

    - ``precision``: the :class:`PrecisionRequest` (what was asked, how ``auto`` is
      decided, the exclusions, the floor), which ``decide()`` answers in the run (see
      :mod:`genesis_fp16_infrastructure.training.precision.decide`). A bare name
      (``precision="bf16"``) is read as ``PrecisionRequest("bf16")``.
    - ``device``: ``cpu``, ``cuda`` or ``cuda:N``; ``seed``: the run's seed.
    - ``steps`` / ``epochs``: the budget of this run (optimizer steps, skipped ones
      included; epoch ends), whichever ends first.
    - ``resume``: continue from the newest valid checkpoint.
    - ``finishes``: this run finishes a run cut short in the same checkpoint folder (the
      judged run sets it on the candidate it continues: judging.unfinished). A newest
      checkpoint that run wrote there at its end, or at its own target, killed before its
      verdict, trains no further step, whatever the budget: it is judged as it is. False
      or None: with ``resume``, ``steps`` go on top of a finished run's checkpoint.
    - ``checkpoint_steps``: a periodic checkpoint every this many steps (None: by the
      clock alone when ``checkpoint_seconds`` applies; else a tenth of ``steps`` when
      given, else each validation of early stopping); ``checkpoint_seconds``: at least
      this often (None: no time bound; torchrun: never, ranks' clocks disagree);
      whichever first, and always at the run's end.
    - ``guard``: the precision guard's configuration; None turns it off.
    - ``fsdp``: under torchrun, shard with FSDP2 instead of DDP.
    - ``initial_loss_scale``: an fp16 run that does not resume a checkpoint starts its
      loss scale here (clamped to the scaler's floor and ceiling) instead of
      ``ScalerConfig.init_scale``: the daemon carries an agent's last scale between
      its runs (``precision/loss_scaler_config.py``). None: the scaler's own.
    - ``log_interval``, ``cuda_graph``, ``compile``: how each step reports and executes,
      :class:`~genesis_fp16_infrastructure.training.step_spec.StepSpec`'s (shared
      with the trainer's ``TrainerConfig``).
    """

    precision: PrecisionRequest = field(default_factory=PrecisionRequest)
    device: str = "cpu"
    # The budget's and the cadence's ranges, which ``FitOptions`` checks (a ``Bounded``).
    steps: int | None = bounded(None, ge=0)
    epochs: int | None = bounded(None, ge=0)
    seed: int = 0
    resume: bool = True
    # Set only in the process that trains, by its judged run: left out of a request's JSON
    # while None (not set: False), so a run file reads and writes as older daemons wrote it.
    finishes: bool | None = field(default=None, metadata={OMIT_NONE: True})
    checkpoint_steps: int | None = bounded(None, ge=1)
    checkpoint_seconds: float | None = bounded(60.0, gt=0.0)  # None: no time bound
    guard: GuardConfig | None = None
    fsdp: bool = False
    initial_loss_scale: float | None = None

    def __post_init__(self) -> None:
        # The library's shorthand, FitOptions(precision="bf16"): one type from here on.
        object.__setattr__(self, "precision", as_request(self.precision))


@dataclass(frozen=True, kw_only=True)
class RunCallbacks:
    """How a run talks back while it runs; never serialised. Whoever starts a run
    builds them once (the daemon's plan, ``train`` in a child) and sets them together
    (``TrainRequest.with_callbacks``).

    ``on_log`` receives a ``TrainingSummary`` every log interval and once more at the
    end; ``should_stop`` is polled before every step, and when it returns True the run
    checkpoints, evaluates and ends early; ``on_diagnostics`` receives an RL agent's
    diagnostics (``{name: float}``) after each iteration, which the daemon exports live
    as ``genesis_fp16_rl_*`` gauges (genesis_fp16/metrics/diagnostics_export.py);
    ``on_precision`` receives the precision the run trains in as soon as ``fit()`` has
    decided it, before the first step (a measured ``auto`` after its calibration), so the
    daemon's precision gauge shows it from then on, not from the first report.
    """

    on_log: Callable[[TrainingSummary], None] | None = None
    should_stop: Callable[[], bool] = _never_stop
    on_diagnostics: Callable[[Mapping[str, float]], object] | None = None
    on_precision: Callable[[PrecisionName], object] | None = None
