"""Kubeflow Trainer: the torch-distributed runtime's ``PET_*`` layout, and progress reports.

A ``TrainJob`` on the ``torch-distributed`` runtime starts one pod per node and gives each
the layout of the run as ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``,
``PET_MASTER_ADDR`` and ``PET_MASTER_PORT`` (torchrun's own flags, as variables). In such a
pod a plain ``genesis-fp16 train AGENT ...`` hands itself to torchrun with that layout::

    layout = PetLayout.from_environ(os.environ)    # None: not a PET_* pod, or already a rank
    if layout is not None:
        os.execv(sys.executable, layout.torchrun_command(sys.argv[1:], sys.executable))

torchrun then starts the node's ranks (each with ``RANK`` set, so none hands off again),
rendezvouses with the other nodes at the master address, and forwards SIGTERM to them.

From Trainer v2.2, with the ``TrainJobStatus`` feature gate, the controller also sets
``KUBEFLOW_TRAINER_STATUS_URL`` (an HTTPS endpoint), ``KUBEFLOW_TRAINER_STATUS_CA_CERT``
and ``KUBEFLOW_TRAINER_STATUS_TOKEN`` (files: its CA and a projected, rotating token).
Rank 0 POSTs ``{"trainerStatus": {"progressPercentage", "estimatedRemainingSeconds",
"metrics": [{"name", "value"}], "lastUpdatedTime"}}`` there, which becomes the TrainJob's
``status.trainerStatus`` (the ``UpdateTrainJobStatusRequest`` of the trainer API). A report
that fails is logged and counted, never raised: the run does not depend on it.
"""

from __future__ import annotations

import json
import logging
import math
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from genesis_fp16.launch.progress_text import Progress, fan_out
from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_infrastructure.api import TrainingSummary

log = logging.getLogger("genesis_fp16.kubeflow")

PET_VARIABLES = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
STATUS_URL = "KUBEFLOW_TRAINER_STATUS_URL"
STATUS_CA_CERT = "KUBEFLOW_TRAINER_STATUS_CA_CERT"
STATUS_TOKEN = "KUBEFLOW_TRAINER_STATUS_TOKEN"
# torchrun's own words for "one process per GPU/CPU" (the runtime's default is auto).
_NPROC_WORDS = ("auto", "cpu", "gpu")
# Kubeflow asks clients to post at most every 5 s; the token file rotates, so it is re-read.
REPORT_INTERVAL_SECONDS = 5.0
_POST_TIMEOUT_SECONDS = 5.0


class PetLayoutError(ValueError):
    """PET_* variables that do not describe a torchrun layout."""


@dataclass(frozen=True)
class PetLayout:
    """One node's place in a multi-node run, from the torch-distributed runtime."""

    nnodes: int
    nproc_per_node: str
    node_rank: int
    master_addr: str
    master_port: int

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> PetLayout | None:
        """The PET_* layout, or None without ``PET_NNODES`` or inside a torchrun rank.

        >>> PetLayout.from_environ({"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1",
        ...     "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "job-node-0-0.job",
        ...     "PET_MASTER_PORT": "29400"}).nnodes
        2
        """
        if "PET_NNODES" not in environ or "RANK" in environ:
            return None
        missing = [name for name in PET_VARIABLES if not environ.get(name)]
        if missing:
            raise PetLayoutError(
                f"PET_NNODES is set but {', '.join(missing)} is not: the torch-distributed "
                f"runtime sets all of {', '.join(PET_VARIABLES)}"
            )
        nnodes = _integer(environ, "PET_NNODES", low=1)
        return cls(
            nnodes=nnodes,
            nproc_per_node=_nproc(environ["PET_NPROC_PER_NODE"]),
            node_rank=_integer(environ, "PET_NODE_RANK", low=0, high=nnodes - 1),
            master_addr=environ["PET_MASTER_ADDR"],
            master_port=_integer(environ, "PET_MASTER_PORT", low=1, high=65535),
        )

    def torchrun_command(self, argv: list[str], python: str) -> list[str]:
        """``python -m torch.distributed.run`` with this layout, running ``genesis_fp16 argv``."""
        layout = [
            f"--nnodes={self.nnodes}",
            f"--nproc-per-node={self.nproc_per_node}",
            f"--node-rank={self.node_rank}",
            f"--master-addr={self.master_addr}",
            f"--master-port={self.master_port}",
        ]
        return torchrun(python, layout, argv)


def torchrun(
    python: str, flags: list[str], argv: list[str], options: Sequence[str] = ()
) -> list[str]:
    """``python OPTIONS -m torch.distributed.run FLAGS -m genesis_fp16 ARGV``: every torchrun
    command line, a PET_* pod's hand-off and the daemon's ranks on one host alike."""
    return [python, *options, "-m", "torch.distributed.run", *flags, "-m", "genesis_fp16", *argv]


def _integer(environ: Mapping[str, str], name: str, low: int, high: int | None = None) -> int:
    value = environ[name]
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if number < low or (high is not None and number > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise PetLayoutError(f"{name}={value!r}: must be an integer {bound}")
    return number


def _nproc(value: str) -> str:
    if value in _NPROC_WORDS or (value.isdigit() and int(value) >= 1):
        return value
    raise PetLayoutError(
        f"PET_NPROC_PER_NODE={value!r}: must be a positive integer or one of "
        f"{', '.join(_NPROC_WORDS)}"
    )


def hand_off_to_torchrun(
    environ: Mapping[str, str],
    argv: list[str],
    python: str,
    execv: Callable[[str, list[str]], object],
) -> None:
    """Replace this process by torchrun when the PET_* layout asks for it; else return.

    ``execv`` is :func:`os.execv` (a test passes a recorder): torchrun takes this
    process's place, so the pod's signals reach it and it forwards them to the ranks.
    """
    layout = PetLayout.from_environ(environ)
    if layout is None:
        return
    command = layout.torchrun_command(argv, python)
    log.info(
        "PET_* layout: node %d of %d, %s process(es) per node, master %s:%d; handing off "
        "to torchrun",
        layout.node_rank,
        layout.nnodes,
        layout.nproc_per_node,
        layout.master_addr,
        layout.master_port,
    )
    execv(python, command)


# --- progress reports ---------------------------------------------------------------


def trainer_status(
    summary: TrainingSummary | None,
    done: int,
    total: int | None,
    elapsed: float,
    finished: bool = False,
) -> dict[str, Any]:
    """One ``UpdateTrainJobStatusRequest`` body: percent, ETA and metrics, all known ones.

    ``done`` steps of ``total`` (None: the agent's own budget, so percent and ETA are
    unknown until the run ends) took ``elapsed`` seconds.

    >>> trainer_status(None, 50, 200, 10.0)["trainerStatus"]["estimatedRemainingSeconds"]
    30
    """
    status: dict[str, Any] = {}
    if finished:
        status["progressPercentage"], status["estimatedRemainingSeconds"] = 100, 0
    elif total:
        status["progressPercentage"] = max(0, min(100, 100 * done // total))
        if done > 0:
            remaining = max(0, total - done) * elapsed / done
            status["estimatedRemainingSeconds"] = round(remaining)
    metrics = _metrics(summary) if summary is not None else []
    if metrics:
        status["metrics"] = metrics
    status["lastUpdatedTime"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"trainerStatus": status}


def _metrics(summary: TrainingSummary) -> list[dict[str, str]]:
    """The key figures of a summary as name/value strings (the API's Metric)."""
    values: dict[str, object] = {
        "step": summary.step,
        "train_loss": summary.train_loss,
        "precision": summary.precision,
        "loss_scale": summary.loss_scale,
        "skipped_steps": summary.skipped_steps,
        "overflow_rate": summary.overflow_rate_window,
        "grad_norm": summary.grad_norm,
        "samples_per_second": summary.samples_per_second,
    }
    found = []
    for name, value in values.items():
        if isinstance(value, float):
            if not math.isfinite(value):
                continue  # NaN is not a value the status can show
            value = f"{value:.6g}"
        found.append({"name": name, "value": str(value)})
    return found


class StatusReporter:
    """Posts trainer status to Kubeflow Trainer from a thread of its own, at most every 5 s.

    The training loop only hands over the newest body (:meth:`submit`); a slow or absent
    endpoint never holds a step. Failures are logged and counted (``failed``).

    >>> reporter = StatusReporter("https://status.example/train", token_path=None,
    ...     ca_path=None, post=lambda url, body, headers, context: None)
    >>> reporter.submit(trainer_status(None, 1, 10, 1.0)); reporter.close()
    >>> reporter.sent
    1
    """

    def __init__(
        self,
        url: str,
        token_path: Path | None,
        ca_path: Path | None,
        interval: float = REPORT_INTERVAL_SECONDS,
        post: Callable[[str, bytes, dict[str, str], ssl.SSLContext | None], None] | None = None,
    ) -> None:
        self.url = url
        self.token_path = token_path
        self.ca_path = ca_path
        self.interval = interval
        self.sent = 0
        self.failed = 0
        self._post = post or _post
        self._pending: dict[str, Any] | None = None
        self._closing = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="kubeflow-status", daemon=True)
        self._thread.start()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> StatusReporter | None:
        """A reporter to ``KUBEFLOW_TRAINER_STATUS_URL``, or None when it is not set."""
        url = environ.get(STATUS_URL)
        if not url:
            return None
        token, ca = environ.get(STATUS_TOKEN), environ.get(STATUS_CA_CERT)
        return cls(url, Path(token) if token else None, Path(ca) if ca else None)

    def submit(self, body: dict[str, Any]) -> None:
        """Queue ``body``; it replaces one not yet sent (only the newest status matters)."""
        with self._wake:
            self._pending = body
            self._wake.notify()

    def close(self, timeout: float = 2 * _POST_TIMEOUT_SECONDS) -> None:
        """Send what is queued (at once, whatever the interval), then stop the thread."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join(timeout)
        log.info("Kubeflow status reports: %d sent, %d failed", self.sent, self.failed)

    def _run(self) -> None:
        last = -math.inf
        while True:
            with self._wake:
                while self._pending is None and not self._closing:
                    self._wake.wait()
                if self._pending is None:
                    return
                wait = last + self.interval - time.monotonic()
                if wait > 0 and not self._closing:
                    self._wake.wait(wait)  # a newer body may replace this one meanwhile
                    continue
                body, self._pending = self._pending, None
            last = time.monotonic()
            self._send(body)

    def _send(self, body: dict[str, Any]) -> None:
        try:
            headers = {"Content-Type": "application/json"}
            if self.token_path is not None:  # re-read: the projected token rotates
                headers["Authorization"] = f"Bearer {self.token_path.read_text().strip()}"
            context = None
            if self.url.startswith("https:"):
                context = ssl.create_default_context(
                    cafile=str(self.ca_path) if self.ca_path else None
                )
            self._post(self.url, json.dumps(body).encode(), headers, context)
            self.sent += 1
        except Exception as exc:  # never the run's problem
            self.failed += 1
            if self.failed == 1 or self.failed % 20 == 0:
                log.warning(
                    "Kubeflow status report to %s failed (%d so far): %s",
                    self.url,
                    self.failed,
                    exc,
                )


def _post(url: str, body: bytes, headers: dict[str, str], context: ssl.SSLContext | None) -> None:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=_POST_TIMEOUT_SECONDS, context=context):
        pass  # urlopen raises on a non-2xx answer


@contextmanager
def report_progress(
    environ: Mapping[str, str], request: TrainRequest, main: bool, stopped: Callable[[], bool]
) -> Iterator[TrainRequest]:
    """``request`` with rank 0's summaries also reported to Kubeflow Trainer, when asked.

    Without ``KUBEFLOW_TRAINER_STATUS_URL``, or on a rank other than 0, the request is
    yielded unchanged. A run that ends normally and was not stopped reports 100%.
    """
    reporter = StatusReporter.from_environ(environ) if main else None
    if reporter is None:
        yield request
        return
    # This run's steps: a resumed run counts from its checkpoint.
    counter, started = Progress(request.steps, request.log_interval), time.monotonic()
    last: TrainingSummary | None = None

    def observe(summary: TrainingSummary) -> None:  # rank 0's summary: a status body
        nonlocal last
        last, done, elapsed = summary, counter.done(summary.step), time.monotonic() - started
        reporter.submit(trainer_status(summary, done, counter.total, elapsed))

    try:
        yield replace(request, on_log=fan_out(request.on_log, observe))
        if not stopped():
            elapsed = time.monotonic() - started
            reporter.submit(trainer_status(last, 0, None, elapsed, finished=True))
    finally:
        reporter.close()
