"""A whole se_darwin run on the GPU against the same host's CPU, phase by phase (issue 66).

    python benchmarks/gpu_vs_cpu.py [--records 2000 100000] [--steps 1600] \
        [--devices cuda cpu] [--pool-dir DIR] [--json PATH] [--quick]

For each pool size, the agent's own sample data (``genesis-fp16 data generate se_darwin
--count N``, seed 0: the same bytes for every device) is trained on by the product's own
command, ``genesis-fp16 train se_darwin --data POOL --steps N --device D --json``, a
process of its own with the host's ``GENESIS_FP16_*`` settings left out:

* **cold**: the first run in a fresh state folder (``GENESIS_FP16_STATE_DIR``): nothing
  cached, the pool parsed, ``auto`` measured;
* **warm**: a second run in the same state folder, into a checkpoint folder of its own
  (the same work again: in the first run's checkpoint folder an unchanged pool is up to
  date and trains no step); what the state folder keeps (the record cache, the
  calibration, the captured step's verdict) is there to be used.

Every run has the same fixed ``--steps`` and the default precision (``auto``). Each row
is timed from outside (the process's wall clock) and split by the run's own ``--json``:

* ``start``: the process's wall less the run's ``wall_seconds`` (interpreter, imports,
  the plan's data scan, the exit);
* ``check``, ``read``, ``encode`` (the pool made tensors), ``eval``: the run's ``phases``;
* ``calib``: the run's ``phases.calibration`` where it reports one, else its
  ``precision_calibration.seconds`` (0 when read from the cache; blank when ``auto`` had
  one candidate and timed nothing);
* ``steps``: ``phases.train`` less ``calib`` (the steps, the checkpoints, validation);
* ``other``: ``wall_seconds`` less every phase above (gate, live watch, drift...).

The ratio is CPU ÷ GPU per pool size and cold/warm, of the process's wall (the whole
run) and of ``wall_seconds`` (the run without its process start). Without CUDA the
``cuda`` half is left out and the output says so. ``--quick``: 2,000 records, 40 steps,
the CPU only (a check that it all runs, CI's size; not a measurement). ``--json PATH``
writes every figure, the commands and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RACY_S = 2.5  # data newer than the manifest's racy window (2 s) is never cached
RUN_TIMEOUT_S = 900
PHASES = ("start", "check", "read", "encode", "calib", "steps", "eval", "other")
QUICK = {"records": [2000], "steps": 40, "devices": ["cpu"]}


def product_env(state: Path | None) -> dict[str, str]:
    """This environment less the host's GENESIS_FP16_* settings, with this tree's
    packages importable and ``state`` as the state folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.pop("ENABLE_FP16_TRAINING", None)
    paths = [ROOT, ROOT / "infrastructure", ROOT / "agents"]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    if state is not None:
        env["GENESIS_FP16_STATE_DIR"] = str(state)
    return env


def product(args: list[str], state: Path | None, cwd: Path) -> tuple[int, float, str, str]:
    """``genesis-fp16 ARGS`` as a process: exit code, wall seconds, stdout, stderr."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=cwd,  # no ./.env of the checkout's
        env=product_env(state),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    return proc.returncode, time.perf_counter() - start, proc.stdout, proc.stderr


def probe_cuda(cwd: Path) -> dict[str, Any]:
    """torch's version and the CUDA device, asked in a process of its own (this one
    never initialises CUDA)."""
    code = (
        "import json, torch; c = torch.cuda.is_available(); print(json.dumps({"
        "'torch': torch.__version__, 'cuda': c, 'threads': torch.get_num_threads(),"
        "'device': torch.cuda.get_device_name(0) if c else None}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=product_env(None), capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


def make_pool(records: int, folder: Path, cwd: Path) -> tuple[Path, float]:
    """The agent's sample data at ``records`` (generated once into ``folder``, reused
    after) and the seconds generating it took (0 when reused)."""
    done = folder / f"se_darwin-{records}"
    if not done.exists():
        partial = done.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        args = ["data", "generate", "se_darwin", "--out", str(partial), "--count", str(records)]
        code, wall, _, err = product([*args, "--seed", "0"], None, cwd)
        if code != 0:
            raise SystemExit(f"genesis-fp16 {' '.join(args)} exited {code}:\n{err[-2000:]}")
        partial.rename(done)
        time.sleep(RACY_S)  # as a daemon's pool is: written before its run, not within 2 s
    else:
        wall = 0.0
    return done / "trajectory_pools" / "se_darwin", wall


def split(wall: float, result: dict[str, Any]) -> dict[str, float | None]:
    """The process's ``wall`` split into PHASES by the run's JSON (see the docstring)."""
    phases = dict(result.get("phases") or {})
    run_wall = float(result.get("wall_seconds") or 0.0)
    calibration = result.get("precision_calibration")
    calib: float | None
    if "calibration" in phases:
        calib = phases.pop("calibration")
    elif calibration is None:
        calib = None
    else:
        calib = 0.0 if calibration.get("cached") else float(calibration.get("seconds", 0.0))
    train = phases.pop("train", 0.0)
    out: dict[str, float | None] = {"start": wall - run_wall, "calib": calib}
    for name in ("check", "read", "encode", "eval"):
        out[name] = phases.pop(name, 0.0)
    out["steps"] = train - (calib or 0.0)
    named = sum(v or 0.0 for k, v in out.items() if k != "start")
    out["other"] = max(run_wall - named, 0.0)
    return {name: out.get(name) for name in PHASES}


def run_one(
    pool: Path, state: Path, checkpoints: Path, device: str, steps: int, cwd: Path
) -> dict[str, Any]:
    """One ``genesis-fp16 train se_darwin ... --json`` and what it reported."""
    args = ["train", "se_darwin", "--data", str(pool), "--steps", str(steps)]
    args += ["--device", device, "--checkpoint-dir", str(checkpoints), "--json"]
    code, wall, out, err = product(args, state, cwd)
    lines = out.strip().splitlines()
    result: dict[str, Any] = {}
    if lines:
        try:
            result = json.loads(lines[-1])
        except ValueError:
            result = {}
    row: dict[str, Any] = {
        "command": "genesis-fp16 " + " ".join(args),
        "exit_code": code,
        "process_seconds": round(wall, 3),
        "wall_seconds": result.get("wall_seconds"),
        "outcome": result.get("outcome"),
        "steps": result.get("steps"),
        "precision": result.get("precision_used"),
        "execution": result.get("execution"),
        "calibration_cached": (result.get("precision_calibration") or {}).get("cached"),
        "record_cache": (result.get("extra") or {}).get("record_cache"),
        "phases_reported": result.get("phases"),
    }
    if code != 0 or not result:
        row["error"] = "\n".join(err.strip().splitlines()[-15:])
        row["phases"] = dict.fromkeys(PHASES)
    else:
        row["phases"] = {
            k: None if v is None else round(v, 3) for k, v in split(wall, result).items()
        }
    return row


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CPU ÷ GPU per pool size and cold/warm: the process's wall and ``wall_seconds``."""
    out = []
    for records in sorted({row["records"] for row in rows}):
        for run in ("cold", "warm"):
            pick = {r["device"]: r for r in rows if (r["records"], r["run"]) == (records, run)}
            cpu, gpu = pick.get("cpu"), pick.get("cuda")
            if cpu is None or gpu is None or cpu["exit_code"] or gpu["exit_code"]:
                continue
            out.append(
                {
                    "records": records,
                    "run": run,
                    "process": round(cpu["process_seconds"] / gpu["process_seconds"], 2),
                    "run_wall": round(cpu["wall_seconds"] / gpu["wall_seconds"], 2),
                }
            )
    return out


def table(rows: list[dict[str, Any]], found: list[dict[str, Any]]) -> str:
    """The rows and ratios as Markdown."""
    head = "| records | device | run | exit | steps | precision | process s | run s | "
    head += " | ".join(PHASES) + " | record cache |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for row in rows:
        phases = " | ".join("" if v is None else f"{v:.2f}" for v in row["phases"].values())
        cache = row["record_cache"] or {}
        cached = f"{cache.get('files_cached', '')}/{cache.get('files_read', '')}" if cache else ""
        run_wall = row["wall_seconds"]
        lines.append(
            f"| {row['records']:,} | {row['device']} | {row['run']} | {row['exit_code']} | "
            f"{row['steps']} | {row['precision']} | {row['process_seconds']:.2f} | "
            f"{'' if run_wall is None else f'{run_wall:.2f}'} | {phases} | {cached} |"
        )
    lines += ["", "cached/parsed files in the record cache column; phases in seconds.", ""]
    if found:
        lines += ["| records | run | CPU ÷ GPU, process | CPU ÷ GPU, run's wall_seconds |"]
        lines += ["| --- | --- | --- | --- |"]
        lines += [
            f"| {r['records']:,} | {r['run']} | {r['process']:.2f}x | {r['run_wall']:.2f}x |"
            for r in found
        ]
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, nargs="+", default=[2000, 100000])
    parser.add_argument("--steps", type=int, default=1600, help="fixed steps of every run")
    parser.add_argument("--devices", nargs="+", choices=("cuda", "cpu"), default=["cuda", "cpu"])
    parser.add_argument("--pool-dir", type=Path, help="generated pools, kept and reused")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--quick", action="store_true", help="2,000 records, 40 steps, CPU only")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.steps, args.devices = QUICK["records"], QUICK["steps"], QUICK["devices"]
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="gpu_vs_cpu-") as tmp:
        work = Path(tmp)
        found = probe_cuda(work)
        devices, notes = list(args.devices), []
        if "cuda" in devices and not found["cuda"]:
            devices.remove("cuda")
            notes.append("no CUDA device here: the cuda half was not run, no ratio")
        print(f"torch {found['torch']}, {found['device'] or 'no CUDA'}; " + "; ".join(notes))
        pools = args.pool_dir or work / "pools"
        pools.mkdir(parents=True, exist_ok=True)
        rows: list[dict[str, Any]] = []
        generated = {}
        load_before = os.getloadavg()
        for records in args.records:
            pool, generated[records] = make_pool(records, pools, work)
            for device in devices:
                state = work / f"state-{device}-{records}"
                for run in ("cold", "warm"):
                    row = run_one(pool, state, state / f"ck-{run}", device, args.steps, work)
                    row.update(records=records, device=device, run=run)
                    rows.append(row)
                    print(
                        json.dumps(
                            {
                                k: row[k]
                                for k in ("records", "device", "run", "process_seconds", "phases")
                            }
                        ),
                        flush=True,
                    )
                shutil.rmtree(state, ignore_errors=True)
    found_ratios = ratios(rows)
    report = {
        "command": " ".join(
            [Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": {
            "host": platform.node(),
            "cpu": _cpu_name(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": found["torch"],
            "torch_threads": found["threads"],
            "cuda_device": found["device"],
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "steps": args.steps,
        "quick": args.quick,
        "pool_generation_seconds": {str(k): round(v, 2) for k, v in generated.items()},
        "notes": notes,
        "runs": rows,
        "ratios": found_ratios,
    }
    print(table(rows, found_ratios))
    if notes:
        print("\n".join(notes))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return report


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__":
    report = main()
    sys.exit(1 if any(row["exit_code"] for row in report["runs"]) else 0)
