"""One agent's settings (``GENESIS_FP16_AGENTS__<AGENT>__*``), and the choices they share
with the daemon-wide settings (genesis_fp16/config/settings.py).

>>> AgentSettings(schedule="*/30 * * * *", precision="bf16").precision
'bf16'
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from genesis_fp16.config.settings_sources import REMOVED_AGENT_FIELDS
from genesis_fp16_infrastructure.api import RequestedName

# The vocabulary's own Literal (the library root's precision_names.RequestedName, whose
# values are CHOICES):
# mypy and pydantic check the per-agent precision against it, and a new precision is one
# edit there.
Precision = RequestedName
# The values of CUDA_GRAPH_REQUESTS in
# genesis_fp16_infrastructure.training.precision.execution_names (a test checks).
CudaGraph = Literal["auto", "on", "off"]
# The values of COMPILE_REQUESTS in
# genesis_fp16_infrastructure.training.precision.execution_names (a test checks).
Compile = Literal["off", "on"]
CUDA_GRAPH_CHOICES: tuple[str, ...] = get_args(CudaGraph)
COMPILE_CHOICES: tuple[str, ...] = get_args(Compile)


def check_device_name(value: str) -> str:
    """``value`` when it is spelt as a device (whether it exists is asked at start-up:
    genesis_fp16/launch/devices.py), else a one-line ValueError with the choices."""
    kind = value.split(":", 1)[0]
    if kind not in ("auto", "cpu", "cuda", "mps", "xpu"):
        raise ValueError(f"device {value!r} is not one of auto, cpu, cuda[:N], mps, xpu")
    return value


# A device setting, the daemon's or an agent's: its spelling checked as it is read.
Device = Annotated[str, AfterValidator(check_device_name)]


def parse_schedule(value: str) -> tuple[str, float | str]:
    """Return ``("interval", seconds)`` or ``("cron", expression)`` for a schedule string.

    >>> parse_schedule("600")
    ('interval', 600.0)
    >>> parse_schedule("*/15 * * * *")
    ('cron', '*/15 * * * *')
    """
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not seconds > 0:
            raise ValueError(f"interval must be > 0 seconds, got {value!r}")
        return "interval", seconds
    from apscheduler.triggers.cron import CronTrigger

    try:
        CronTrigger.from_crontab(text)
    except ValueError as exc:
        raise ValueError(
            f"{value!r} is neither an interval in seconds nor a 5-field cron string ({exc})"
        ) from None
    return "cron", text


def check_schedule(value: str) -> str:
    """``value`` when :func:`parse_schedule` reads it, else its one-line ValueError."""
    parse_schedule(value)
    return value


# A schedule setting, the daemon's or an agent's: read as it will be scheduled.
Schedule = Annotated[str, AfterValidator(check_schedule)]


class AgentSettings(BaseModel):
    """One agent's settings; unset fields fall back to the daemon-wide defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    schedule: Schedule | None = None
    precision: Precision | None = None
    data_path: Path | None = None
    steps: int | None = Field(default=None, ge=1)
    epochs: int | None = Field(default=None, ge=1)
    device: Device | None = None
    # Run the precision probe once before the first bf16/fp16 run (genesis_fp16/jobs/probe_gate.py).
    probe_before_low_precision: bool = False
    # More than 1: the daemon runs each job under torchrun with this many processes.
    nproc: int = Field(default=1, ge=1)
    # auto, on or off: replay each step from a captured CUDA graph (FitOptions.cuda_graph).
    cuda_graph: CudaGraph | None = None
    # off or on: the model compiled inside the captured step (FitOptions.compile).
    compile: Compile | None = None
    # Wall-clock limit of one run (default GENESIS_FP16_RUN_TIMEOUT_SECONDS, 6 h); past it
    # the run stops at its next step with a checkpoint (see Settings.run_timeout_seconds).
    run_timeout_seconds: float | None = Field(default=None, gt=0)
    # A trusted pool the promotion gate also scores candidate and served model on
    # (GENESIS_FP16_AGENTS__<AGENT>__GOLDEN_DATA; genesis_fp16_infrastructure.judging.gate).
    golden_data: Path | None = None
    # The agent's own options (its plugin declares them: `genesis-fp16 agents --json`),
    # checked against that declaration at start-up and on reload (genesis_fp16/jobs/run_request.py).
    options: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _drop_removed_fields(cls, value: Any) -> Any:
        """A removed field (``ISOLATION``) is ignored, not refused: the daemon says so in
        one line (SettingsSources.describe_removed), and an existing ``.env`` still starts."""
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if str(k).upper() not in REMOVED_AGENT_FIELDS}
        return value

    @field_validator("options", mode="before")
    @classmethod
    def _lowercase_option_keys(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(key).lower(): item for key, item in value.items()}
        return value

    @model_validator(mode="after")
    def _steps_or_epochs(self) -> AgentSettings:
        if self.steps is not None and self.epochs is not None:
            raise ValueError("set steps or epochs per run, not both")
        return self
