"""Plan the configurations, run each (in a fresh subprocess by default), write the results.

genesis-fp16 bench                       # the full run on the best device here
python benchmarks/run.py --sizes default --runners ours,hand --steps 10
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

import msgspec
import torch

from genesis_fp16.bench.config import (
    AUTO_RUNNERS,
    CPU_FP16_STEPS,
    CPU_FP16_WARMUP,
    CUDA_ONLY_RUNNERS,
    DEFAULT_BATCH_SIZES,
    DEFAULT_RUNNERS,
    PRECISIONS_BY_DEVICE,
    RUNNERS,
    RUNS_ROOT,
    SIZES,
    TINY_RUNNERS,
    TINY_SIZES,
    UNTIMED_STEPS,
    BenchConfig,
    BenchPrecision,
)
from genesis_fp16.bench.measure import ROW_MARKER, Row, run_config
from genesis_fp16.bench.report import (
    derive,
    device_slug,
    markdown_table,
    note_for,
    write_csv,
    write_plot,
)
from genesis_fp16.config.extras import BENCH_EXTRA
from genesis_fp16.config.settings import resolve_device
from genesis_fp16_infrastructure.api import Workload


@dataclass(frozen=True)
class BenchOptions:
    """What `genesis-fp16 bench` was asked to do."""

    device: str
    sizes: tuple[str, ...]
    precisions: tuple[BenchPrecision, ...]
    runners: tuple[str, ...]
    batch_sizes: tuple[int, ...] = (64,)
    warmup: int = UNTIMED_STEPS
    steps: int = 20
    fp16_warmup: int | None = None
    fp16_steps: int | None = None
    seed: int = 0
    out_dir: Path | None = None  # None: a fresh folder under RUNS_ROOT (fresh_out_dir)
    in_process: bool = False
    tiny: bool = False
    threads: int | None = None
    tag: str = ""


def _choices(
    value: str | None, valid: Sequence[str], flag: str, default: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The comma-separated names in ``value``, each one of ``valid``; ``default`` if None."""
    if value is None:
        return default
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [v for v in items if v not in valid]
    if bad or not items:
        raise ValueError(f"{flag} {value!r}: choose from {', '.join(valid)} (comma-separated)")
    return items


def _batch_sizes(args: argparse.Namespace, device: str) -> tuple[int, ...]:
    if args.batch_size is not None and args.batch_sizes is not None:
        raise ValueError("--batch-size and --batch-sizes: give one of them")
    if args.batch_size is not None:
        text = str(args.batch_size)
    elif args.batch_sizes is not None:
        text = args.batch_sizes
    else:
        return DEFAULT_BATCH_SIZES[device]
    try:
        sizes = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(
            f"--batch-sizes {text!r}: comma-separated integers, e.g. 64,8192"
        ) from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--batch-sizes {text!r}: each must be at least 1")
    return sizes


def _device(name: str) -> str:
    device = resolve_device(name)
    if device not in PRECISIONS_BY_DEVICE:
        raise ValueError(f"--device {name!r}: choose from auto, cpu, cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device 'cuda': no CUDA device is available to this torch build")
    return device


def _runners(
    args: argparse.Namespace, device: str, precisions: Sequence[BenchPrecision]
) -> tuple[str, ...]:
    default = TINY_RUNNERS if args.tiny else DEFAULT_RUNNERS[device]
    runners = _choices(args.runners, RUNNERS, "--runners", default)
    if args.precisions != "all" and "auto" in precisions and not set(runners) & set(AUTO_RUNNERS):
        raise ValueError(f"--precisions auto: only {', '.join(AUTO_RUNNERS)} resolve auto")
    cuda_only = [r for r in runners if r in CUDA_ONLY_RUNNERS]
    if device != "cuda" and cuda_only:
        raise ValueError(f"--runners {','.join(cuda_only)}: CUDA graphs need --device cuda")
    return runners


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    """Validate the parsed arguments; raises ValueError with a one-line message."""
    device = _device(args.device)
    precisions = PRECISIONS_BY_DEVICE[device]
    if args.precisions != "all":  # the valid names, in the order asked
        asked = _choices(args.precisions, precisions, "--precisions")
        precisions = cast(tuple[BenchPrecision, ...], asked)
    if args.tag and not re.fullmatch(r"[A-Za-z0-9.-]+", args.tag):
        raise ValueError(f"--tag {args.tag!r}: use letters, digits, '.' and '-' only")
    steps = args.steps if args.steps is not None else (5 if args.tiny else 20)
    for flag, value in (("--steps", steps), ("--threads", args.threads or 1)):
        if value < 1:
            raise ValueError(f"{flag} {value}: must be at least 1")
    return BenchOptions(
        device=device,
        precisions=precisions,
        runners=_runners(args, device, precisions),
        sizes=_choices(args.sizes, SIZES, "--sizes", TINY_SIZES if args.tiny else SIZES),
        batch_sizes=_batch_sizes(args, device),
        warmup=args.warmup if args.warmup is not None else (1 if args.tiny else UNTIMED_STEPS),
        steps=steps,
        fp16_warmup=args.fp16_warmup,
        fp16_steps=args.fp16_steps,
        seed=args.seed,
        out_dir=args.out_dir,
        # On CUDA the peak memory is torch's own count, which in-process rows keep apart
        # (reset_peak_memory_stats): one process saves ~12 s of start-up per row there.
        # --tiny too: a smoke test, its rows' start-ups were most of its 6 minutes.
        in_process=args.in_process or device == "cuda" or args.tiny,
        tiny=args.tiny,
        threads=args.threads,
        tag=args.tag,
    )


def plan(options: BenchOptions, data_path: Path | None = None) -> list[BenchConfig]:
    """Every (size, batch size, precision, runner): the runners of one precision run back
    to back, so that a change in the load of a shared machine hits them alike."""
    cpu = options.device == "cpu"
    fp16_warmup = (
        options.fp16_warmup
        if options.fp16_warmup is not None
        else (CPU_FP16_WARMUP if cpu else options.warmup)
    )
    fp16_steps = options.fp16_steps or (CPU_FP16_STEPS if cpu else options.steps)
    base = BenchConfig(  # each row sets its size, precision and runner
        size="",
        precision="fp32",
        runner="",
        device=options.device,
        warmup_steps=options.warmup,
        timed_steps=options.steps,
        seed=options.seed,
        tiny=options.tiny,
        threads=options.threads,
        data_path=None if data_path is None else str(data_path),
    )
    fp16_total = fp16_warmup + fp16_steps
    configs = []
    for size, batch, precision, runner in itertools.product(
        options.sizes, options.batch_sizes, options.precisions, options.runners
    ):
        if precision == "auto" and runner not in AUTO_RUNNERS:
            continue  # the other libraries have no auto of their own
        config = replace(base, size=size, batch_size=batch, runner=runner, precision=precision)
        if precision == "fp16":
            config = replace(config, warmup_steps=fp16_warmup, timed_steps=fp16_steps)
        elif precision == "fp32" and "fp16" in options.precisions:
            # The fp32 reference for fp16's eval-loss gap, at fp16's step count.
            config = replace(config, eval_at=(fp16_total,))
        configs.append(config)
    return configs


def _run_isolated(config: BenchConfig) -> Row:
    proc = subprocess.run(
        [sys.executable, "-m", "genesis_fp16.bench.measure"],
        input=msgspec.json.encode(config).decode(),
        capture_output=True,
        text=True,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(ROW_MARKER):
            row: Row = json.loads(line[len(ROW_MARKER) :])
            return row
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"worker exited {proc.returncode}: {last}")


def _failed_row(config: BenchConfig, error: str) -> Row:
    return {
        "device": config.device,
        "size": config.size,
        "runner": config.runner,
        "precision_requested": config.precision,
        "precision_ran": "none",
        "honest": False,
        "batch_size": config.batch_size,
        "warmup_steps": config.warmup_steps,
        "timed_steps": config.timed_steps,
        "execution": "none",
        "error": error,
    }


def _run_all(
    configs: Sequence[BenchConfig], in_process: bool, progress: Callable[[str], None]
) -> list[Row]:
    rows: list[Row] = []
    for config in configs:
        label = f"{config.size}@{config.batch_size}/{config.runner}/{config.precision}"
        try:
            row = run_config(config, isolated=False) if in_process else _run_isolated(config)
        except Exception as exc:  # a failing peer is a row of its own, not a crashed run
            row = _failed_row(config, f"{type(exc).__name__}: {exc}".splitlines()[0])
        rows.append(row)
        progress(f"{label}: {_outcome(row)}")
    return rows


def _outcome(row: Row) -> str:
    """What a progress line says of one row: its timing, or why there is none."""
    error = row.get("error")
    if error:
        missing = re.match(r"ModuleNotFoundError: No module named '([\w.]+)'", str(error))
        if missing:
            return f"not installed ({missing.group(1)}): {BENCH_EXTRA}"
        return f"failed: {error}"
    ms = row.get("median_step_ms") or 0.0
    return f"ran {row['precision_ran']}, median {ms:.1f} ms/step"


# A 1-minute load average above this share of the cores: other work is competing for them.
LOADED_SHARE = 0.5


def load_warning(load: float, cores: int | None) -> str | None:
    """One line when the 1-minute ``load`` is high for ``cores`` (the bench's timings and
    ratios then measure the other work as much as the trainers), else None.

    >>> load_warning(1.6, 2)
    'warning: the machine is loaded (1-minute load average 1.60 on 2 cores): ...'
    >>> load_warning(0.4, 2) is None
    True
    """
    cores = cores or 1
    if load <= LOADED_SHARE * cores:
        return None
    return (
        f"warning: the machine is loaded (1-minute load average {load:.2f} on {cores} "
        "cores): other work shares the cores, so the timings and ratios will be noisy; "
        "bench on an idle machine, or with --threads 1 (docs/benchmarks.md)"
    )


def fresh_out_dir(root: Path = RUNS_ROOT, now: datetime.datetime | None = None) -> Path:
    """A folder of its own for one run, created: ``root/<UTC time>``, ``-2``... if taken."""
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H%M%SZ")
    root.mkdir(parents=True, exist_ok=True)
    for attempt in itertools.count(1):
        path = root / (stamp if attempt == 1 else f"{stamp}-{attempt}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def run_benchmark(
    options: BenchOptions, command: str, progress: Callable[[str], None] = print
) -> tuple[list[Row], Path]:
    """Run every planned configuration; write CSV and PNG into ``options.out_dir``, or a
    fresh folder (:func:`fresh_out_dir`); return the rows and CSV path. A loaded machine
    is named on stderr first (:func:`load_warning`)."""
    warning = load_warning(os.getloadavg()[0], os.cpu_count())
    if warning is not None:
        print(f"{command.split()[0]}: {warning}", file=sys.stderr, flush=True)
    out_dir = options.out_dir if options.out_dir is not None else fresh_out_dir()
    progress(f"results will go to {out_dir}")
    with tempfile.TemporaryDirectory(prefix="genesis-bench-") as folder:
        data_path = Workload.write_data(Path(folder), options.tiny, options.seed)
        rows = _run_all(plan(options, data_path), options.in_process, progress)
    derive(rows)
    name = next((r["device_name"] for r in rows if r.get("device_name")), options.device)
    for row in rows:
        row.update(command=command, note=note_for(row), device_name=row.get("device_name", name))
    suffixes = ["tiny"] * options.tiny + [options.tag] * bool(options.tag)
    stem = "_".join(["bench_" + device_slug(options.device, name), *suffixes])
    csv_path = out_dir / f"{stem}.csv"
    write_csv(rows, csv_path)
    write_plot(rows, csv_path.with_suffix(".png"), f"genesis-fp16 bench on {name}")
    (out_dir / f"{stem}.md").write_text(markdown_table(rows) + "\n")
    return rows, csv_path
