"""`genesis-fp16 train AGENT`: one training run of an agent's world model, in the foreground.

The precision requested is, in order: ``--precision``, ``ENABLE_FP16_TRAINING=false``
(fp32), the agent's own override, ``ENABLE_FP16_TRAINING=true`` (fp16), ``auto``; without
``--precision`` the precision guard's memory of a demotion lowers it, as in the daemon
(the request is built by genesis_fp16/jobs/run_request.py for both). The precision guard
(``GENESIS_FP16_GUARD_*``) watches the run. ``--option KEY=VALUE`` sets an option the
agent declares (``genesis-fp16 agents --json``). What ran, and why, is logged and
reported. Without ``--data`` the agent trains on a sample dataset
generated once into the state folder. With ``--json`` the last line of stdout is one JSON
object (``TrainResult.to_json()``).

Under ``torchrun --nproc-per-node N -m genesis_fp16 train AGENT`` every rank runs this
command in one process group (DDP; ``--fsdp`` shards with FSDP2) and only rank 0 prints.
SIGTERM or Ctrl-C (SIGINT) stops the run at its next step boundary, with a checkpoint
(exit 75); a second Ctrl-C quits at once (exit 130), losing the steps since the last
checkpoint. A finished run exits 0, one whose steps learned nothing 1, bad input 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from genesis_fp16.cli import UsageError, strict_json
from genesis_fp16.commands.train_checks import (
    check_arguments,
    integer_from,
    own_state_folder,
    refuse_unusable_device,
)
from genesis_fp16.config.agent_names import agent_argument
from genesis_fp16.config.agent_settings import COMPILE_CHOICES, CUDA_GRAPH_CHOICES
from genesis_fp16.config.plugins import LoadedPlugin, PluginError, load_plugin
from genesis_fp16.config.settings import (
    PRECISION_CHOICES,
    Settings,
    resolve_device,
)
from genesis_fp16.jobs.guard_state import announce_run
from genesis_fp16.jobs.run_request import (
    RequestOverrides,
    parse_option_flags,
    plan_request,
    resolve_options,
)
from genesis_fp16.launch import kubeflow
from genesis_fp16.launch.progress_text import Progress, fan_out
from genesis_fp16.metrics.tracking import RunTracker, open_tracker
from genesis_fp16.plugin_api import TrainRequest, TrainRequestError, TrainResult
from genesis_fp16.service.logsetup import configure_logging
from genesis_fp16.service.startup_signals import note_sigterm, take_over_sigterm
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    CheckpointsFolder,
    DataError,
    Outcome,
    PrecisionName,
    RunEntry,
    TrainingSummary,
    on_set_aside,
)

# torch (through genesis_fp16.launch.distributed and genesis_fp16_infrastructure.training's
# checkpoint and precision modules) is imported inside run(), _train() and _request(), not here:
# cli.py imports every command module to build its parser, and --help should not wait
# 1.8 s for torch.

log = logging.getLogger("genesis_fp16.train")

# Steps between two summaries when a terminal's bar or a tracker wants them.
PROGRESS_INTERVAL = 10
# How a run that returned a result ends (docs/commands.md): 0 finished (success, up to
# date, or a candidate the gate rejected); 1 a run that learned nothing; 75 stopped by
# Ctrl-C or SIGTERM with a checkpoint (sysexits' EX_TEMPFAIL: run it again to continue;
# 3 is a daemon's orphaned child's). Bad input is 2, a second Ctrl-C 130.
EXIT_STOPPED = 75
EXIT_CODES = {"failed": 1, "stopped": EXIT_STOPPED}


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number of seconds > 0")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "train", help="train an agent's world model once", description=__doc__
    )
    parser.add_argument(
        "agent", metavar="AGENT", type=agent_argument, help="agent plugin name (see `agents`)"
    )
    parser.add_argument(
        "--precision",
        metavar="{" + ",".join(PRECISION_CHOICES) + "}",
        help="precision to request; default from ENABLE_FP16_TRAINING or the agent, else auto",
    )
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--steps",
        type=int,
        help="optimizer steps of this run, run in full (default: GENESIS_FP16_STEPS_PER_RUN, "
        "else the agent's own budget: se_darwin stops on validation)",
    )
    budget.add_argument("--epochs", type=int, help="passes over the data in this run")
    parser.add_argument("--data", type=Path, help="data file or folder (default: sample data)")
    parser.add_argument("--checkpoint-dir", type=Path, help="default: the agent's state folder")
    parser.add_argument(
        "--checkpoint-steps",
        type=integer_from(1),
        metavar="N",
        help="checkpoint every N steps (default GENESIS_FP16_CHECKPOINT_STEPS, else by "
        "--checkpoint-seconds alone; under torchrun a tenth of the run or each validation)",
    )
    parser.add_argument(
        "--checkpoint-seconds",
        type=_positive_float,
        metavar="S",
        help="checkpoint at least every S seconds (default GENESIS_FP16_CHECKPOINT_SECONDS, 60)",
    )
    parser.add_argument("--seed", type=int, help="seed (default GENESIS_FP16_SEED, 0)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="a forced run: with --steps/--epochs, train them on top of the served model even "
        "when the data is unchanged (a plain train finishes a cut-short run, trains a new "
        "candidate on changed data, and is up to date on unchanged data)",
    )
    parser.add_argument("--json", action="store_true", help="end stdout with one JSON object")
    parser.add_argument(
        "--tracking-dir",
        type=Path,
        metavar="DIR",
        help="write the run's curves as TensorBoard event files under DIR/AGENT/RUN_ID "
        "(default: GENESIS_FP16_TRACKING_DIR, unset: none; docs/tracking.md)",
    )
    parser.add_argument(
        "--fsdp", action="store_true", help="under torchrun: shard the model with FSDP2, not DDP"
    )
    parser.add_argument(
        "--device",
        help="cpu, cuda or cuda:N (default: the agent's DEVICE, else GENESIS_FP16_DEVICE, auto)",
    )
    parser.add_argument(
        "--cuda-graph",
        choices=CUDA_GRAPH_CHOICES,
        help="replay each step from a captured CUDA graph: on, off, or auto (the default: "
        "GENESIS_FP16_CUDA_GRAPH; captured wherever the run can be, or as measured)",
    )
    parser.add_argument(
        "--compile",
        choices=COMPILE_CHOICES,
        help="on: the model compiled (torch.compile, max-autotune-no-cudagraphs) inside the "
        "captured step; a run that cannot be captured fails in one line (default: "
        "GENESIS_FP16_COMPILE, off)",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option the agent declares (repeatable; `genesis-fp16 agents --json` lists "
        "them), on top of GENESIS_FP16_AGENTS__<AGENT>__OPTIONS__<KEY>",
    )
    # For the daemon's launcher: one {"progress": summary} JSON line per log interval.
    parser.add_argument("--json-progress", action="store_true", help=argparse.SUPPRESS)
    # For the daemon's launcher: the whole run request as JSON (TrainRequest.to_json).
    parser.add_argument("--request", type=Path, help=argparse.SUPPRESS)
    # train installs its own SIGTERM handler (_stop_on_signals), which takes over one that
    # came during start-up (genesis_fp16.service.startup_signals).
    parser.set_defaults(func=run, takes_sigterm=True)


def run(args: argparse.Namespace) -> int:
    from genesis_fp16.commands.reading import command_settings  # train's start loads no other
    from genesis_fp16.launch.distributed import TorchrunEnv

    check_arguments(args)
    handed, log_level = _read_request_file(args.request) if args.request else (None, "INFO")
    # A daemon's child or rank (--request) reads no .env and no setting: the run file
    # carries what it needs, so a .env edit the daemon rejected cannot fail its runs.
    settings = command_settings("train") if handed is None else None
    config = None if settings is None else settings.agent(args.agent)
    try:
        # The daemon loaded this agent under its allowlist before it sent the run.
        loaded = load_plugin(args.agent, settings.plugin_allowlist if settings else None)
        if config is not None:  # checked before any data is generated or a group formed
            flags = parse_option_flags(args.option)
            resolve_options(args.agent, loaded.capabilities.options, config.own.options, flags)
    except (PluginError, TrainRequestError) as exc:
        raise UsageError(str(exc)) from None
    if settings is None:  # the launcher relays its child's records: it parses JSON
        configure_logging("json", log_level)
    else:
        configure_logging(settings.log_format, settings.log_level)
    try:
        # A Kubeflow Trainer pod (PET_* set, no RANK): torchrun takes this process's place.
        kubeflow.hand_off_to_torchrun(os.environ, sys.argv[1:], sys.executable, os.execv)
        env = TorchrunEnv.from_environ(os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    main = env is None or env.is_main
    stop = _stop_on_signals()
    if handed is not None:  # a torchrun rank of a daemon job: the request comes whole
        wanted = handed.device
    else:
        assert config is not None
        wanted = resolve_device(args.device or config.device)
    refuse_unusable_device(args, config, wanted)
    # The daemon's own runs work under its lock; one operator's run takes the folder's.
    owner = own_state_folder(args, settings) if settings is not None and main else None
    try:
        return _run_owned(args, settings, loaded, env, main, stop, handed, wanted)
    finally:
        if owner is not None:
            os.close(owner)  # in-process callers (tests) may run train again


def _run_owned(
    args: argparse.Namespace,
    settings: Settings | None,
    loaded: LoadedPlugin,
    env: Any,
    main: bool,
    stop: threading.Event,
    handed: TrainRequest | None,
    wanted: str,
) -> int:
    from genesis_fp16.launch.distributed import process_group, rank_zero_first

    with process_group(env, wanted) as device:
        bar: ProgressBar | None = None
        tracker: RunTracker | None = None
        if handed is not None:  # a daemon's run: the daemon tracks it from the relayed lines
            request = replace(handed, device=device)
        else:
            with rank_zero_first(env):  # rank 0 generates the sample data, the others wait
                assert settings is not None  # only a daemon's run comes without settings
                request, bar = _request(args, settings, loaded, wanted, main)
            request = replace(request, fsdp=args.fsdp, device=device)
            tracking_dir = args.tracking_dir or settings.tracking_dir
            if main and tracking_dir is not None:
                tracker = open_tracker(tracking_dir, args.agent, uuid.uuid4().hex[:12], request)
        if args.json_progress or not main:  # the launcher's lines; other ranks report nothing
            shown = print_progress if main else None
        else:
            shown = bar.update if bar else None
        # The run's callbacks, once (a daemon's child relays what its launcher reads).
        relayed = args.json_progress and main
        diagnostics = relay_to_daemon() if relayed else None
        on_log = fan_out(shown, tracker.log_summary if tracker else None)
        decided = print_precision if relayed else None
        request = request.with_callbacks(on_log, stop.is_set, diagnostics, decided)
        with kubeflow.report_progress(os.environ, request, main, stop.is_set) as request:
            code = _train(args, loaded.plugin, request, main, bar, tracker)
        models = CheckpointsFolder(Path(request.checkpoint_dir))
        if settings is not None and main and models.serves_checkpoints():
            # The daemon's bounds; imported here: prometheus_client comes with them.
            from genesis_fp16.jobs.model_history import bound_history

            bound_history(settings, models)
        # An operator's run says in its exit code how it ended; a daemon's child and a
        # torchrun rank exit 0 (their launchers read the result, and torchrun takes a
        # rank's non-zero exit for a crash).
        return code if env is None and handed is None else 0


def _read_request_file(path: Path) -> tuple[TrainRequest, str]:
    """The request and log level the daemon's launcher wrote for its child or torchrun's
    ranks (genesis_fp16/launch/handoff.py); from here on the daemon's end of stdin is watched."""
    from genesis_fp16.launch.handoff import read_run_file, watch_daemon

    try:
        request, log_level = read_run_file(path)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"--request {path}: not a readable run request ({exc})") from None
    watch_daemon()  # before torch and the plugin are imported: seconds in which the daemon may go
    return request, log_level


_INTERRUPTED = (
    b"\ngenesis-fp16: interrupted: stopping at the next step with a checkpoint "
    b"(run the same train again to finish it; Ctrl-C again to quit at once, losing the steps "
    b"since the last checkpoint)\n"
)


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or a first Ctrl-C: the run stops at its next step boundary
    and checkpoints. A second Ctrl-C raises KeyboardInterrupt at once (exit 130)."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        return stop

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        # os.write, not print: a handler that runs while the main thread is inside a
        # write to stderr would make print raise (a reentrant call on a buffered stream).
        os.write(sys.stderr.fileno(), _INTERRUPTED)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        note_sigterm()  # a resident run process ends after this run
        stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, on_interrupt)
    if take_over_sigterm():  # stopped while it started: stop at the first step boundary
        stop.set()
    return stop


def _train(
    args: argparse.Namespace,
    plugin: Any,
    request: TrainRequest,
    main: bool,
    bar: ProgressBar | None = None,
    tracker: RunTracker | None = None,
) -> int:
    log.info(
        "training %s: requested precision %s (%s), device %s",
        args.agent,
        request.precision.requested,
        request.precision_reason,
        request.device,
    )
    from genesis_fp16_infrastructure.api import (
        LockBusy,
        PrecisionError,
        check_result,
        run_plugin,
    )

    result = None
    started = time.monotonic()
    # An operator's run in the state folder leaves its record for `status` (a daemon's
    # child leaves that to the daemon; --checkpoint-dir trains some other model).
    recorded = main and args.request is None and args.checkpoint_dir is None
    try:
        # Log records print above the bar (tqdm.write), which redraws below them.
        with bar.showing() if bar else contextlib.nullcontext():
            # A field of the wrong type: one line naming it, not json.dumps' traceback below.
            result = check_result(run_plugin(plugin, request), args.agent)
    except (Exception, SystemExit) as exc:  # recorded: `status` says it in one line too
        # Bad input is one line: a TrainRequestError is an ExecutionError too (run_plugin
        # refuses it as the request's), a LockBusy another process writing --checkpoint-dir.
        refused = isinstance(exc, DataError | PrecisionError | TrainRequestError | LockBusy)
        if recorded:
            why = str(exc) if refused else f"{type(exc).__name__}: {exc}"
            _record(request.checkpoint_dir, None, why, started)
        if refused:
            raise UsageError(str(exc)) from None
        raise  # a plugin's bug: the command's own handler reports it (keeps the traceback)
    finally:
        if tracker is not None:  # after a failure too: the curves up to it stay readable
            if result is not None:
                tracker.log_result(result)
            tracker.close()
    if recorded:  # the daemon announces its own runs' (jobs.guard_state.record_run)
        announce_run(AgentFolder.at(Path(request.checkpoint_dir).parent), args.agent, result)
        _record(request.checkpoint_dir, result, "", started)
    out = result.to_json()
    tracking = None
    if tracker is not None:
        tracking = {"path": str(tracker.path), "failed_writes": tracker.failures}
        out["tracking"] = tracking
    # The whole reason goes to the log (and --json); the text summary keeps it short.
    log.info(
        "trained %s in %s (requested %s: %s), %s steps (%s)",
        args.agent,
        result.precision_used,
        result.precision_requested,
        result.precision_reason,
        result.execution,
        result.execution_reason,
    )
    if not main:
        return 0
    if args.json:
        print(json.dumps(out, allow_nan=False), flush=True)
    else:
        print(describe(result, tracking))
    return EXIT_CODES.get(result.outcome, 0)


def _record(checkpoint_dir: Path, result: TrainResult | None, error: str, started: float) -> None:
    """The run's record in its agent folder (``<state_dir>/agents/<agent>/checkpoints``
    holds its models): ``result``, or the one-line ``error`` it ended with, as the daemon
    keeps its own runs'. ``started``: ``time.monotonic()`` at its start."""
    duration = time.monotonic() - started
    if result is None:
        entry = RunEntry.of_error(Outcome.FAILED, error, duration, "train")
    else:
        entry = result.history_entry(duration, "train")
    AgentFolder.at(Path(checkpoint_dir).parent).save_run(entry)


def _request(
    args: argparse.Namespace, settings: Settings, loaded: LoadedPlugin, device: str, main: bool
) -> tuple[TrainRequest, ProgressBar | None]:
    """The run request (genesis_fp16/jobs/run_request.py) and the progress bar: on a terminal
    only (a pipe or a file gets the log records alone, no carriage returns)."""
    checkpoint_dir = (
        args.checkpoint_dir or AgentFolder(settings.state_dir, args.agent).checkpoint_dir
    )
    # Said, so that a mistyped folder is not a silent restart.
    if args.resume and not CheckpointsFolder(checkpoint_dir).has_checkpoint():
        print(
            f"genesis-fp16: warning: --resume: no checkpoint in {str(checkpoint_dir)!r}; "
            "training from scratch",
            file=sys.stderr,
        )
    terminal = main and sys.stderr.isatty()
    tracked = (args.tracking_dir or settings.tracking_dir) is not None
    overrides = RequestOverrides(
        precision=args.precision,
        steps=args.steps,
        epochs=args.epochs,
        data_path=args.data,
        checkpoint_dir=args.checkpoint_dir,
        seed=args.seed,
        # As the daemon runs: a cut-short run finished, changed data a new candidate,
        # unchanged data up to date whatever the budget. --resume forces the budget.
        resume=True,
        forced=args.resume,
        cuda_graph=args.cuda_graph,
        compile=args.compile,
        log_interval=PROGRESS_INTERVAL if terminal or tracked else None,
        options=parse_option_flags(args.option),  # run() refused bad ones
        checkpoint_steps=args.checkpoint_steps,
        checkpoint_seconds=args.checkpoint_seconds,
    )
    try:
        request = plan_request(
            settings, args.agent, loaded.plugin, loaded.capabilities, device, overrides
        )
    except TrainRequestError as exc:
        raise UsageError(str(exc)) from None
    return request, ProgressBar(request.steps, sys.stderr) if terminal else None


# -- What train shows: the progress bar on a terminal, the JSON lines the daemon's launcher
# reads, and the closing summary. run() picks where each summary goes (fan_out of the bar,
# the launcher's lines and the tracker), and prints describe() of the result at the end
# unless --json asked for the JSON object.


def print_diagnostics(values: Mapping[str, float]) -> None:
    """One ``{"diagnostics": ...}`` line for the launcher (a non-finite value as null)."""
    print(json.dumps({"diagnostics": strict_json(values)}, allow_nan=False), flush=True)


def relay_to_daemon() -> Callable[[Mapping[str, float]], None]:
    """In a daemon's child: print each state file set aside in this process, one
    ``{"set_aside": ...}`` line (the launcher counts it in the daemon), and return the
    printer of the run's live diagnostics."""
    on_set_aside(lambda event: print(json.dumps(event.relayed()), flush=True))
    return print_diagnostics


def print_progress(summary: TrainingSummary) -> None:
    """One ``{"progress": summary}`` line for the launcher."""
    print(json.dumps({"progress": summary.to_json()}, allow_nan=False), flush=True)


def print_precision(precision: PrecisionName) -> None:
    """One ``{"precision": name}`` line for the launcher: the run's precision, decided."""
    print(json.dumps({"precision": precision}), flush=True)


class ProgressBar:
    """tqdm's bar on a terminal: steps of this run, rate and ETA, loss, precision, skips.

    Drawn while :meth:`showing` is entered; records logged meanwhile go through
    ``tqdm.write``: they print on lines of their own above the bar, drawn again below.
    """

    def __init__(self, total: int | None, stream: TextIO) -> None:
        self.total = total
        self.stream = stream
        self.bar: Any = None
        self.counter = Progress(total, PROGRESS_INTERVAL)  # this run's steps, from its checkpoint

    @contextlib.contextmanager
    def showing(self) -> Iterator[None]:
        from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs (types-tqdm not in dev)
        from tqdm.contrib.logging import logging_redirect_tqdm  # type: ignore[import-untyped]

        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):  # not a terminal after all, or a closed one
            columns = 0
        # A terminal that reports no width (0, as a bare pty) would get no bar from tqdm.
        width = {"dynamic_ncols": True} if columns else {"ncols": 100}
        with logging_redirect_tqdm():
            self.bar = tqdm(total=self.total, file=self.stream, unit="step", **width)
            try:
                yield
            finally:
                self.bar.close()  # leaves the bar's last state on a line of its own

    def update(self, summary: TrainingSummary) -> None:
        if self.bar is None:
            return
        done = self.counter.done(summary.step)
        self.bar.set_postfix_str(
            f"loss {summary.train_loss:.4f}, {summary.precision}, skipped {summary.skipped_steps}",
            refresh=False,
        )
        self.bar.update(done - self.bar.n)


def describe(result: TrainResult, tracking: Mapping[str, Any] | None = None) -> str:
    """The closing summary of a run (and its ``tracking``: where its curves went): first
    what became of it, in one short line (:func:`verdict`), then the numbers. The long
    reasons (the precision's, the execution's, the gate's in full) are in ``--json`` and
    the log."""
    metrics = "  ".join(f"{k}={_number(v, '.4g')}" for k, v in result.eval.items())
    checkpoint = str(result.checkpoint) if result.checkpoint else None
    return (
        f"{result.agent}: {verdict(result)}\n"
        f"  {result.steps} steps in {result.precision_used} (requested "
        f"{result.precision_requested}), {result.execution}\n"
        f"  train loss {_number(result.final_train_loss, '.4f')}, {result.skipped_steps} "
        f"skipped, {_number(result.samples_per_second, '.0f')} samples/s, "
        f"{_number(result.wall_seconds, '.1f')}s\n"
        f"  eval: {metrics}\n"
        f"  checkpoint: {checkpoint}  quarantined: {result.quarantined}"
        + _describe_tracking(tracking)
        + _describe_bundle(result.fault_bundle)
    )


def verdict(result: TrainResult) -> str:
    """What became of the run, and the short reason: ``served: held_out: loss 0.41 vs
    served 0.43 on 400 records, ...``, ``rejected: ...``, ``up to date: ...``,
    ``stopped: ...``."""
    outcome, gate = result.outcome, result.gate
    if outcome == Outcome.UP_TO_DATE:
        records = result.data.records if result.data is not None else None
        return f"up to date: the model has learned all {records} records, no step taken"
    if outcome == Outcome.STOPPED:  # SIGTERM or Ctrl-C, or the daemon's stop
        return f"stopped at step {result.steps}, checkpointed: run train again to finish"
    if outcome == Outcome.FAILED:
        return f"failed: {result.failure} ({result.failure_detail})"
    if gate is None:
        return f"done: {result.steps} steps (no promotion gate: the newest checkpoint is the model)"
    if gate.outcome == Outcome.REJECTED:
        return f"rejected: {_gate_reason(result, passed=False)}; the served model stays"
    if gate.outcome == Outcome.INCONCLUSIVE:  # issue 62: kept, judged again as records arrive
        needs = f"about {gate.records_needed} records" if gate.records_needed else "more records"
        return f"inconclusive: kept, judged again when {needs} show it; the served model stays"
    if gate.outcome == Outcome.HELD:  # the operator pinned the served model
        return f"held by the pin: {_gate_reason(result, passed=True)}; the pinned model stays"
    if gate.outcome == Outcome.PROMOTED:
        if gate.served_id is None:
            auc = _number(result.eval.get("auc"), ".3f")
            return f"served: the first model, nothing to beat (AUC {auc})"
        return f"served: {_gate_reason(result, passed=True)}"
    return f"done: {result.steps} steps (no promotion gate: the newest checkpoint is the model)"


def _gate_reason(result: TrainResult, passed: bool) -> str:
    """The deciding figures of the run's gate in a few words: both models' mean loss on the
    first set (the gate's scores), else the first set that passed (or did not) in its own
    words, else the gate's reason, cut short: the verdict file has every set."""
    gate = result.gate
    assert gate is not None  # verdict() asks it of a judged run only
    cand, served = gate.candidate, gate.served
    metric = next(iter(cand.losses), "") if cand is not None else ""
    if cand is not None and served is not None and metric in served.losses:
        ours, theirs = cand.losses[metric], served.losses[metric]
        return f"{metric} {ours:.3f} vs {theirs:.3f} on {cand.records} {cand.name} records"
    sets = [c for c in gate.comparisons if c.passed is passed and c.reason]
    return (sets[0].reason if sets else gate.reason)[:160]


def _describe_bundle(path: str | None) -> str:
    return f"\n  fault bundle: {path} (genesis-fp16 replay {path})" if path else ""


def _describe_tracking(tracking: Mapping[str, Any] | None) -> str:
    if tracking is None:
        return ""
    failed = tracking["failed_writes"]
    return f"\n  curves: {tracking['path']}" + (f" ({failed} writes failed)" if failed else "")


def _number(value: float | None, spec: str) -> str:
    """``value`` formatted, or n/a: a run of 0 steps has no train loss (NaN)."""
    return "n/a" if value is None or math.isnan(value) else format(value, spec)
