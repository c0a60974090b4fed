"""`make gpu-check`: the GPU paths checked by one command on a CUDA host, results written.

    python tests/gpu_check.py --out benchmarks/results

1. the ``gpu``-marked tests, in one pytest process (never xdist: 5-15 processes sharing
   one GPU slowed an 11 s test past 200 s on the H100);
2. both agents' training on CUDA, each with ``--json`` and a fresh state folder:
   ``train se_darwin --device cuda`` (and again with ``--cuda-graph on``, and with
   ``--compile on``: the model compiled inside the captured step), ``train rlhf_ppo
   --device cuda``;
3. the bench's CUDA rows, and the memory table: fp32/bf16/fp16 x eager/captured x batch
   64, 1,024, 8,192, 16,384 on ``large``, each row's peak beside the formula's prediction
   (``genesis_fp16/bench/memory.py``), written to ``<out>/memory_table_<device>.md``;
   se_darwin's bytes with its captured step's graph pool measured
   (``benchmarks/se_darwin_footprint.py --device cuda``);
4. ``<out>/gpu-check_<device>.md`` and ``.json``: python, torch, CUDA, the device, the
   commit, pytest's outcome per test and each run's command, exit code and JSON line,
   ready to commit.

It ends with one line per check (``CHECKS``: the captured step verified against eager,
the compiled step's tolerance measured, a failing capture falling back, the carried loss
scale, the range statistics and the flight recorder on a captured step, the bench's
per-row peak; then each run, the bench and the memory table), each
PASS, FAIL or NOT RUN with what decided it, and the closing verdict.

Without CUDA it stops before anything runs, with one line and exit code 1. The exit code
is 0 only when every test passed or skipped and every training run exited 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Both agents as the issue asks, and se_darwin's captured step (what cuda_graph=auto waits on).
TRAINING_RUNS: dict[str, tuple[str, ...]] = {
    "se_darwin": ("train", "se_darwin", "--device", "cuda", "--seed", "1", "--json"),
    "se_darwin --cuda-graph on": (
        *("train", "se_darwin", "--device", "cuda", "--cuda-graph", "on"),
        *("--seed", "1", "--json"),
    ),
    # Not yet run on a GPU: the compiled step's first run there (its compile time shows
    # in wall_seconds).
    "se_darwin --compile on": (
        *("train", "se_darwin", "--device", "cuda", "--compile", "on"),
        *("--seed", "1", "--json"),
    ),
    "rlhf_ppo": ("train", "rlhf_ppo", "--device", "cuda", "--seed", "1", "--json"),
    # The same host's CPU with defaults: what the GPU's speed-up is measured against.
    "se_darwin on cpu": ("train", "se_darwin", "--device", "cpu", "--seed", "1", "--json"),
}
# The H100 report's section 2 rows, and the compile-inside-the-graph stretch row.
BENCH_RUNS: dict[str, tuple[str, ...]] = {
    "large, eager and captured": (
        *("bench", "--device", "cuda", "--sizes", "large"),
        *("--runners", "ours,ours-graph,hand-graph", "--precisions", "fp32,bf16,fp16"),
        *("--batch-sizes", "64,8192", "--steps", "50", "--tag", "gpu-check"),
    ),
    "large, compiled inside the graph": (
        *("bench", "--device", "cuda", "--sizes", "large", "--runners", "ours-graph-compile"),
        *("--precisions", "bf16", "--batch-sizes", "8192", "--steps", "50"),
        *("--tag", "gpu-check-compile"),
    ),
}
# The memory table's rows (issue 39): a few steps are enough for a peak.
MEMORY_RUN: tuple[str, ...] = (
    *("bench", "--device", "cuda", "--sizes", "large", "--runners", "ours,ours-graph"),
    *("--precisions", "fp32,bf16,fp16", "--batch-sizes", "64,1024,8192,16384"),
    *("--warmup", "2", "--steps", "5", "--tag", "gpu-check-memory"),
)
# Each check and the gpu-marked tests that decide it (a substring of the test's id).
CHECKS: dict[str, tuple[str, ...]] = {
    "captured step verified bit for bit against eager (fp32, bf16, fp16)": (
        "test_verify_run_on_cuda_passes_bit_for_bit",
        "test_200_graphed_steps_equal_eager_bit_for_bit",
    ),
    "compiled step within its stated tolerance (the measured difference in its verdict)": (
        "test_compiled_step_within_the_stated_tolerance",
    ),
    "a capture that raises falls back to eager from the same step": (
        "test_a_real_capture_that_raises_falls_back_on_cuda",
    ),
    "carried loss scale, at most 1 skipped step in the first 50, eval within its SE": (
        "test_on_cuda_a_carried_scale_skips_at_most_one_step_in_the_first_50",
    ),
    "range statistics sampled off the replayed graph (eager sampled steps, plain replays)": (
        "test_captured_run_samples_eagerly_and_replays_the_plain_graph",
        "test_cost_chosen_sampling_on_the_captured_step",
    ),
    "the flight recorder on a captured step (its overflow bundled, the run still captured)": (
        "test_a_captured_run_bundles_its_overflow_and_keeps_its_graph",
    ),
    "bench, a row's peak leaves out earlier rows' memory": (
        "test_a_rows_peak_leaves_out_what_earlier_rows_left_allocated",
    ),
}
RUN_TIMEOUT_S = 300
GPU_SPEEDUP_TARGET = 3.0  # default train se_darwin: the H100 against its own host's CPU
TAIL_LINES = 40


@dataclass
class PytestOutcome:
    """The gpu-marked tests' pytest run: its exit code, summary and outcome per test."""

    command: str
    exit_code: int
    summary: str
    outcomes: dict[str, str] = field(default_factory=dict)
    tail: str = ""
    properties: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class RunOutcome:
    """One `genesis-fp16 train ... --json` on CUDA: exit code, wall time, its JSON line."""

    label: str
    command: str
    exit_code: int
    wall_seconds: float
    result: dict[str, Any] | None
    tail: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.result is not None


def cuda_or_exit() -> dict[str, Any]:
    """The host's torch and CUDA device; without them exit 1 with one line saying why."""
    try:
        import torch
    except ImportError as exc:
        sys.exit(f"gpu-check: {sys.executable} cannot import torch ({exc}); install it first")
    if not torch.cuda.is_available():
        sys.exit(
            f"gpu-check: no CUDA device: {sys.executable} has torch {torch.__version__}, "
            "which sees none; run it on a GPU host (docs/results.md, What has been checked where)"
        )
    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "device_count": torch.cuda.device_count(),
        "driver": _nvidia_smi_driver(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "interpreter": sys.executable,
        "cpu_count": os.cpu_count(),
        "commit": _commit(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _nvidia_smi_driver() -> str:
    if shutil.which("nvidia-smi") is None:
        return "unknown (no nvidia-smi)"
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    proc = subprocess.run(query, capture_output=True, text=True, check=False)
    return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 else "unknown"


def _commit() -> str:
    """HEAD's short hash, marked dirty when the tree has changes; unknown without git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    except OSError:
        return "unknown (no git)"
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    return head.stdout.strip() + (" (with uncommitted changes)" if status.stdout.strip() else "")


def _stream(command: list[str], **kwargs: Any) -> tuple[int, list[str]]:
    """Run ``command``, echoing its output as it comes; return the exit code and the lines."""
    lines: list[str] = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line.rstrip("\n"))
    return proc.returncode, lines


def run_gpu_tests() -> PytestOutcome:
    """The gpu-marked tests in this one pytest process (xdist blocked), with a junit file."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:xdist"]
        command += ["-p", "no:cacheprovider", "-rA", f"--junitxml={junit}"]
        code, lines = _stream(command, cwd=ROOT)
        xml = junit.read_text() if junit.exists() else None
    outcomes = junit_outcomes(xml) if xml else {}
    properties = junit_properties(xml) if xml else {}
    shown = "python -m pytest -m gpu -p no:xdist -p no:cacheprovider -rA"
    summary = pytest_summary(lines)
    return PytestOutcome(shown, code, summary, outcomes, _tail(lines, code), properties)


def junit_outcomes(xml_text: str) -> dict[str, str]:
    """``{test id: outcome}`` from pytest's junit XML: passed, or failed/error/skipped: why."""
    outcomes = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        found = [child for child in case if child.tag in ("failure", "error", "skipped")]
        if not found:
            outcomes[name] = "passed"
            continue
        kind = {"failure": "failed"}.get(found[0].tag, found[0].tag)
        why = " ".join(found[0].get("message", "").split())[:160]
        outcomes[name] = f"{kind}: {why}" if why else kind
    return outcomes


def junit_properties(xml_text: str) -> dict[str, dict[str, str]]:
    """``{test id: {name: value}}``: what tests recorded with pytest's ``record_property``
    (a verification's verdict, a measured difference)."""
    found: dict[str, dict[str, str]] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        for prop in case.iter("property"):
            found.setdefault(name, {})[prop.get("name", "")] = prop.get("value", "")
    return found


def check_lines(
    tests: PytestOutcome, runs: list[RunOutcome], memory: RunOutcome | None = None
) -> list[str]:
    """One line per check: PASS, FAIL or NOT RUN, and what decided it."""
    lines = []
    for check, needles in CHECKS.items():
        found = {
            name: outcome
            for name, outcome in tests.outcomes.items()
            if any(needle in name for needle in needles)
        }
        if not found:
            lines.append(f"NOT RUN  {check}: no such test ran")
            continue
        bad = [f"{n.rsplit('::', 1)[-1]}: {o}" for n, o in found.items() if o != "passed"]
        word = "FAIL" if bad else "PASS"
        extra = [f"{k}={v}" for n in found for k, v in tests.properties.get(n, {}).items()]
        why = "; ".join(bad) if bad else f"{len(found)} test(s) passed"
        lines.append(f"{word:<8} {check}: {why}" + (f" ({'; '.join(extra)})" if extra else ""))
    for run in [*runs, *([memory] if memory is not None else [])]:
        # A run that resolved a captured step but went eager failed its check: on a GPU
        # the captured step must verify (se_darwin's stacked ensemble, compile inside).
        fallback = (run.result or {}).get("execution_fallback")
        word = "PASS" if run.ok and not fallback else "FAIL"
        why = f", fell back to eager: {run.result.get('execution_reason')}" if fallback else ""
        lines.append(f"{word:<8} {run.label}: {run.command} (exit {run.exit_code}{why})")
    return lines


def pytest_summary(lines: list[str]) -> str:
    """pytest's last ``=== 12 passed, 1 failed in 40s ===`` line, without the rules."""
    for line in reversed(lines):
        match = re.fullmatch(r"=+ (.*\bin [0-9.]+s.*?) =+", line.strip())
        if match:
            return match.group(1)
    return "no pytest summary line (see the tail)"


def run_training(label: str, args: tuple[str, ...]) -> RunOutcome:
    """One CLI command (a training run, or the bench) in a fresh state folder, the host's
    GENESIS_FP16_* left out."""
    shown = "genesis-fp16 " + " ".join(args)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.pop("ENABLE_FP16_TRAINING", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    print(f"\n--- {shown}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        env["GENESIS_FP16_STATE_DIR"] = str(Path(tmp) / "state")
        started = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "genesis_fp16", *args],
                cwd=tmp,  # no ./.env of the checkout's
                env=env,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            wall = round(time.monotonic() - started, 1)
            return RunOutcome(label, shown, -1, wall, None, f"timed out after {wall} s")
    wall = round(time.monotonic() - started, 1)
    outcome = RunOutcome(label, shown, proc.returncode, wall, last_json_line(proc.stdout))
    if not outcome.ok:
        outcome.tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-TAIL_LINES:])
    print(json.dumps(outcome.result) if outcome.result is not None else outcome.tail, flush=True)
    return outcome


def run_bench(label: str, args: tuple[str, ...]) -> RunOutcome:
    """One bench command; it writes its own CSV and table (``--out-dir``), no JSON line."""
    outcome = run_training(label, args)
    if outcome.exit_code == 0:
        outcome.result, outcome.tail = {"exit_code": 0}, ""
    return outcome


def run_memory_table(out: Path, device: str) -> RunOutcome:
    """The memory table's bench rows, then the table beside the formula (on the CPU)."""
    outcome = run_bench("memory table", (*MEMORY_RUN, "--out-dir", str(out.resolve())))
    found = sorted(out.glob("bench_cuda-*_gpu-check-memory.csv"))
    if outcome.exit_code != 0 or not found:
        outcome.result = None
        outcome.tail = outcome.tail or "the bench wrote no memory rows"
        return outcome
    page = out / f"memory_table_{slug(device)}.md"
    command = [sys.executable, "-m", "genesis_fp16.bench.memory", str(found[-1]), "--out"]
    proc = subprocess.run([*command, str(page)], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        outcome.exit_code, outcome.result = proc.returncode, None
        outcome.tail = "\n".join(proc.stderr.splitlines()[-TAIL_LINES:])
        return outcome
    outcome.result = {"exit_code": 0, "table": str(page)}
    print(proc.stdout, flush=True)
    return outcome


def run_footprint(out: Path, device: str) -> RunOutcome:
    """se_darwin's bytes with the CUDA graph pool of its captured step measured
    (``benchmarks/se_darwin_footprint.py --device cuda``), to ``<out>``."""
    page = out / f"se_darwin_footprint_{slug(device)}.md"
    argv = ["benchmarks/se_darwin_footprint.py", "--device", "cuda", "--out", str(page)]
    shown = "python " + " ".join(argv[:3])
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        wall = round(time.monotonic() - started, 1)
        return RunOutcome("se_darwin footprint", shown, -1, wall, None, "timed out")
    wall = round(time.monotonic() - started, 1)
    result = {"exit_code": 0, "page": str(page)} if proc.returncode == 0 else None
    tail = "" if result else "\n".join(proc.stderr.splitlines()[-TAIL_LINES:])
    print(proc.stdout if result else tail, flush=True)
    return RunOutcome("se_darwin footprint", shown, proc.returncode, wall, result, tail)


def last_json_line(stdout: str) -> dict[str, Any] | None:
    """The result object that ends a `--json` run's stdout, or None when there is none.
    A failed command's error object (``{"error", "kind", "exit_code"}``) is no result: its
    stderr, on the page, says why."""
    lines = stdout.strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and "error" not in value else None


def _tail(lines: list[str], code: int) -> str:
    return "" if code == 0 else "\n".join(lines[-TAIL_LINES:])


def slug(device: str) -> str:
    """A file-name part from a device name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "cuda"


def speedup(runs: list[RunOutcome]) -> str:
    """The default se_darwin run's training seconds on CUDA against the host's CPU."""
    by_label = {run.label: run.result for run in runs}
    cuda, cpu = by_label.get("se_darwin"), by_label.get("se_darwin on cpu")
    if not cuda or not cpu:
        return "se_darwin cuda against cpu: not measured (a run failed)"
    ratio = float(cpu["wall_seconds"]) / float(cuda["wall_seconds"])
    mark = "meets" if ratio >= GPU_SPEEDUP_TARGET else "misses"
    return (
        f"se_darwin with defaults: cuda {cuda['wall_seconds']:.2f} s "
        f"({cuda['precision_used']}, {cuda['execution']}) against cpu {cpu['wall_seconds']:.2f} s "
        f"({cpu['precision_used']}, {cpu['execution']}): {ratio:.2f}x, {mark} the "
        f"{GPU_SPEEDUP_TARGET:g}x target"
    )


def bench_tables(out: Path) -> list[str]:
    """The markdown tables the bench commands wrote under ``out``."""
    lines = []
    for page in sorted(out.glob("bench_cuda-*_gpu-check*.md")):
        lines += [f"### `{page.name}`", "", page.read_text().strip(), ""]
    return lines


def render(
    info: dict[str, Any],
    tests: PytestOutcome,
    runs: list[RunOutcome],
    bench: list[RunOutcome] | None = None,
    out_dir: Path | None = None,
) -> str:
    """The results page: provenance, the tests' outcomes, each run and its JSON line."""
    out = [f"# make gpu-check on {info['device']} ({info['date']})", ""]
    out += ["Written by `make gpu-check` (tests/gpu_check.py); every figure below is measured.", ""]
    out += ["| | |", "| --- | --- |"]
    out += [f"| {key} | {value} |" for key, value in info.items()]
    out += ["", "## gpu-marked tests, one process", "", f"`{tests.command}`: **{tests.summary}**"]
    out += ["", "| test | outcome |", "| --- | --- |"]
    out += [f"| `{name}` | {outcome} |" for name, outcome in sorted(tests.outcomes.items())]
    if tests.tail:
        out += ["", "```text", tests.tail, "```"]
    out += ["", "## Training on CUDA", ""]
    for run in runs:
        verdict = "ok" if run.ok else f"FAILED (exit {run.exit_code})"
        out += [f"`{run.command}`: {verdict}, {run.wall_seconds} s", ""]
        if run.result is not None:
            out += ["```json", json.dumps(run.result, sort_keys=True), "```", ""]
        if run.tail:
            out += ["```text", run.tail, "```", ""]
    out += [f"**{speedup(runs)}**", ""]
    if bench is not None:
        out += ["## Bench (`genesis-fp16 bench`, ms per step)", ""]
        for run in bench:
            verdict = "ok" if run.exit_code == 0 else f"FAILED (exit {run.exit_code})"
            out += [f"`{run.command}`: {verdict}, {run.wall_seconds} s", ""]
            if run.tail:
                out += ["```text", run.tail, "```", ""]
        out += bench_tables(out_dir) if out_dir is not None else []
    for page in sorted(out_dir.glob("memory_table_*.md")) if out_dir is not None else []:
        out += ["## Memory table (peak MiB beside the formula)", "", page.read_text().strip(), ""]
    for page in sorted(out_dir.glob("se_darwin_footprint_*.md")) if out_dir is not None else []:
        text = page.read_text().strip().replace("# ", "## ", 1)
        out += [text, ""]
    out += ["## Checks", "", "```text", *check_lines(tests, runs), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def verdict(tests: PytestOutcome, runs: list[RunOutcome], page: Path) -> str:
    """The one closing line: what passed, what failed, where the results are."""
    parts = [f"tests {tests.summary}"]
    parts += [f"{run.label}: {'ok' if run.ok else f'exit {run.exit_code}'}" for run in runs]
    checks_ok = not any(line.startswith(("FAIL", "NOT RUN")) for line in check_lines(tests, runs))
    word = "passed" if tests.ok and checks_ok and all(r.ok for r in runs) else "FAILED"
    return f"gpu-check {word}: {'; '.join(parts)}; results in {page}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    info = cuda_or_exit()
    tests = run_gpu_tests()
    runs = [run_training(label, command) for label, command in TRAINING_RUNS.items()]
    args.out.mkdir(parents=True, exist_ok=True)
    out_dir = str(args.out.resolve())
    bench = [
        run_bench(label, (*command, "--out-dir", out_dir)) for label, command in BENCH_RUNS.items()
    ]
    bench.append(run_memory_table(args.out, info["device"]))
    bench.append(run_footprint(args.out, info["device"]))
    page = args.out / f"gpu-check_{slug(info['device'])}.md"
    page.write_text(render(info, tests, runs, bench, args.out))
    data = {
        "host": info,
        "tests": asdict(tests),
        "runs": [asdict(r) for r in runs],
        "bench": [asdict(r) for r in bench],
        "speedup": speedup(runs),
    }
    page.with_suffix(".json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    line = verdict(tests, [*runs, *bench], page)
    print(f"\n{speedup(runs)}\n")
    print("\n".join(check_lines(tests, [*runs, *bench])))
    print(f"\n{line}")
    return 0 if line.startswith("gpu-check passed") else 1


if __name__ == "__main__":
    sys.exit(main())
