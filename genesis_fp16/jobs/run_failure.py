"""A run that ended without a result (:class:`RunError`): stopped while its child started,
or failed, with why in the words its count, its record, its log line and ``/healthz`` use.

The failure's reason is its count's label (``genesis_fp16_run_failures_total{reason}``);
where the host is at fault (a full or read-only disk, a lost device) the error is one line
naming the path or device, and the agent is degraded until a run writes its checkpoint.

>>> error = RunError.failed(TrainRequestError("option 'x' is not known"))
>>> (error.outcome, error.reason, error.record_reason)
('failed', 'refused', "refused: option 'x' is not known")
"""

from __future__ import annotations

from dataclasses import dataclass

from genesis_fp16.config.storage import storage_error
from genesis_fp16.jobs.supervising import RunHung
from genesis_fp16.launch.devices import device_lost
from genesis_fp16.launch.launcher import LaunchError, RunStopped
from genesis_fp16.plugin_api import TrainRequestError


@dataclass(frozen=True)
class RunError:
    """Why a run has no result. ``outcome``: ``stopped`` (asked to stop while its child
    started: no step, no failure) or ``failed``; ``reason``: the failure's label (None:
    stopped); ``why``: one line; ``degraded``: the host's fault, what ``/healthz`` says of
    the agent (:meth:`health`; None: not the host's fault); ``traceback``: the plugin's
    bug, logged with its traceback."""

    outcome: str
    reason: str | None
    why: str
    error: BaseException
    degraded: str | None = None
    traceback: bool = False

    @classmethod
    def stopped(cls, exc: RunStopped) -> RunError:
        return cls("stopped", None, str(exc), exc)

    @classmethod
    def failed(cls, exc: BaseException) -> RunError:
        """A failed run: one line for a refusal, a storage error naming its path, a lost
        device, ``sys.exit()``; the plugin's bug keeps its traceback too. Why it failed is
        the exception's to say; where it ran is the run's (:meth:`health`)."""
        reason, host = failure_reason(exc)
        one_line = isinstance(exc, TrainRequestError | LaunchError)
        why = host or (str(exc) if one_line else f"{type(exc).__name__}: {exc}")
        exited = isinstance(exc, SystemExit) and not host  # said as such, no traceback
        return cls("failed", reason, why, exc, host, not (one_line or host or exited))

    def health(self, device: str) -> str | None:
        """What ``/healthz`` says of the agent whose run failed on ``device`` (None: not
        the host's fault, the agent is not degraded by it)."""
        if self.degraded is not None and self.reason == "device_unavailable":
            # Every run on it fails until the GPU is back (or the daemon restarts on another).
            return f"device {device} unavailable: {self.degraded}"
        return self.degraded

    @property
    def said(self) -> str:
        """The log line's error (a plugin's ``sys.exit()`` named as such)."""
        if isinstance(self.error, SystemExit) and self.degraded is None:
            return f"the plugin called sys.exit({self.error.code!r})"
        return self.why

    @property
    def record_reason(self) -> str:
        """What the run's record (``status``) says of it."""
        return self.why if self.reason is None else f"{self.reason}: {self.why}"


def failure_reason(exc: BaseException) -> tuple[str, str | None]:
    """The failure's reason (its count's label), and the host's fault in one line where
    it is one (a full or read-only disk, a lost device): None for the others."""
    if isinstance(exc, LaunchError):  # the child's own one line, naming the path or device
        host = exc.reason in ("storage", "device_unavailable")
        return exc.reason, str(exc) if host else None
    if isinstance(exc, RunHung):
        return "hung", None
    if (lost := device_lost(exc)) is not None:
        return "device_unavailable", lost
    if (storage := storage_error(exc)) is not None:
        return "storage", storage
    if isinstance(exc, SystemExit):
        return "exit", None
    if isinstance(exc, TrainRequestError):
        return "refused", None
    return "error", None
