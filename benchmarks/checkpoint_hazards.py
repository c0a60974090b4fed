"""Plant each checkpoint-folder hazard of issue 29 (item 4) again and again against real
``genesis-fp16 train se_darwin`` runs, and count the runs that fail.

Each round trains 20 steps into a fresh checkpoint folder (a valid checkpoint at step
20), plants one hazard, then runs ``train --resume --steps 20`` twice: both must exit 0,
and the first must resume from a valid checkpoint (never from the planted one). The
hazards:

- ``folder``: a directory at the name of the next run's final checkpoint (step 40);
- ``fifo``: a FIFO at that name;
- ``devzero``: a symlink to /dev/zero at that name;
- ``no_encoder``: a newer (step 30), schema-valid checkpoint without the encoder;
- ``full_disk``: a run whose every file write past 64 KiB fails (RLIMIT_FSIZE, with
  SIGXFSZ ignored: EFBIG, as a full disk gives ENOSPC) is expected to fail (counted
  apart); the two runs after it must resume from the step-20 checkpoint.

::

    python benchmarks/checkpoint_hazards.py --rounds 5 \
        --out benchmarks/results/checkpoint_hazards_cpu-2-cores.md
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from genesis_fp16_infrastructure.data.synthetic import generate_pool  # noqa: E402
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager, load_checkpoint  # noqa: E402

HAZARDS = ("folder", "fifo", "devzero", "no_encoder", "full_disk")
ENTRY_POINT = Path(sys.executable).parent / "genesis-fp16"


def _train(folder: Path, data: Path, resume: bool, full_disk: bool = False) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(GENESIS_FP16_STATE_DIR=str(folder / "state"), GENESIS_FP16_LOG_LEVEL="WARNING")

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 2**10, 64 * 2**10))

    args = ["train", "se_darwin", "--data", str(data), "--steps", "20", "--precision", "fp32"]
    args += ["--checkpoint-dir", str(folder / "ck"), "--json", *(["--resume"] if resume else [])]
    started = time.perf_counter()
    proc = subprocess.run(
        [str(ENTRY_POINT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=small_files if full_disk else None,
    )
    out: dict[str, object] = {"rc": proc.returncode, "seconds": time.perf_counter() - started}
    if proc.returncode == 0:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        out["resumed_from"] = result.get("extra", {}).get("resumed_from")
    else:
        out["error"] = (proc.stderr.strip().splitlines() or [""])[-1][:300]
    return out


def _plant(hazard: str, ck: Path, good: Path) -> Path:
    manager = CheckpointManager(ck)
    at = manager.path_for(40)
    if hazard == "folder":
        at.mkdir()
    elif hazard == "fifo":
        os.mkfifo(at)
    elif hazard == "devzero":
        at.symlink_to("/dev/zero")
    elif hazard == "no_encoder":
        state = load_checkpoint(good)
        del state["extra"]["encoder"]
        state["step"] = 30
        at = manager.save(state)
    return at


def _round(hazard: str, data: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        first = _train(folder, data, resume=False)
        good = CheckpointManager(folder / "ck").checkpoints()[-1]
        planted = _plant(hazard, folder / "ck", good)
        runs = []
        if hazard == "full_disk":
            runs.append({**_train(folder, data, resume=True, full_disk=True), "expected": "fail"})
        after = [_train(folder, data, resume=True) for _ in range(2)]
        failed = [r for r in after if r["rc"] != 0]
        # The first run after the hazard resumes from the valid step-20 file, never the plant.
        wrong = after[0].get("resumed_from") not in (str(good),)
        return {
            "hazard": hazard,
            "first_rc": first["rc"],
            "planted": planted.name,
            "runs": runs + after,
            "failures": len(failed) + (1 if wrong and not failed else 0),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hazards", default=",".join(HAZARDS), help="comma-separated")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "pool.json"
        data.write_text(json.dumps(generate_pool(400, seed=5)))
        rows = []
        for hazard in args.hazards.split(","):
            rounds = [_round(hazard, data) for _ in range(args.rounds)]
            runs = [r for rd in rounds for r in rd["runs"]]  # type: ignore[attr-defined]
            row = {
                "hazard": hazard,
                "rounds": args.rounds,
                "runs_after": sum(1 for r in runs if r.get("expected") != "fail"),
                "failures": sum(int(rd["failures"]) for rd in rounds),  # type: ignore[call-overload]
                "full_disk_runs_failed": sum(
                    1 for r in runs if r.get("expected") == "fail" and r["rc"] != 0
                ),
                "mean_run_seconds": sum(float(r["seconds"]) for r in runs) / len(runs),  # type: ignore[arg-type]
                "example_error": next((r["error"] for r in runs if "error" in r), ""),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out is not None:
        lines = [
            "# Checkpoint folder hazards against real `train se_darwin --resume` runs",
            "",
            f"`python benchmarks/checkpoint_hazards.py --rounds {args.rounds}`, "
            f"{time.strftime('%Y-%m-%d', time.gmtime())}, {os.cpu_count()} CPU cores (shared).",
            "",
            "| hazard | rounds | runs after it | failed or wrong resume | full-disk runs failed "
            "(expected) | mean s/run |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['hazard']} | {r['rounds']} | {r['runs_after']} | {r['failures']} | "
                f"{r['full_disk_runs_failed']} | {float(r['mean_run_seconds']):.1f} |"  # type: ignore[arg-type]
            )
        errors = [f"- {r['hazard']}: `{r['example_error']}`" for r in rows if r["example_error"]]
        lines += ["", "One error line per hazard, where a run failed:", "", *errors, ""]
        args.out.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
