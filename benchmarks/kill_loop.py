"""kill -9 a real `genesis-fp16 train` again and again, then let it finish: what is lost.

Each life runs ``train AGENT --resume`` (with ``--steps TARGET`` when a target is asked:
``--form same`` repeats ``--steps TARGET``, ``--form rest`` asks ``--steps <rest>``, the
target minus the newest checkpoint on disk, as issue 93's job did) at the checkpoint
cadence asked (``--checkpoint-steps``, else the default), reports every step on stdout
(``--json-progress``, log interval 1), and is killed (SIGKILL) at a random moment:

- in one life of ``--time-share`` (default 1 in 4): a random time after its start, up to
  ``--max-delay`` s (start-up, reading, training, saving or judging, as it falls);
- in the others: once it reports a random step of its own, up to twice the job's steps
  over the kills (``--span``); one that reaches the job's last step first is killed a
  random time up to ``--end-delay`` s after it: in its end-of-run save, evaluation or gate.

Moments are drawn by the run's progress, not the clock alone: on a loaded host a life's
start-up alone can outlast a clock's delay, and every kill would land before step 1.
For each kill it records:

- lost steps: the last step the life reported minus the newest checkpoint on disk after
  the kill (se_darwin trains each candidate in ``candidates/<id>/``, so every candidate
  folder counts);
- whether the life continued the killed run: its first reported step is the step after
  the newest checkpoint before it (a life killed before its first step proves nothing);
- the candidate folders on disk.

A life killed after its candidate's verdict was written (in its last second, after its
gate) had ended the job: the loop stops there and takes that candidate's checkpoint as
the end (another forced ``--steps N`` would train N more, on top of the served model).

After the kills, one more life runs to its end, and an unbroken run of the same request
in a fresh folder is compared with it: final step, checkpoint name, the last and the
served weights bit for bit::

    python benchmarks/kill_loop.py --kills 30 --steps 6000 --checkpoint-steps 300 --form rest

Without ``--steps`` (the agent's own budget) every kill is a timed one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint
from genesis_fp16_infrastructure.training.run.early_stop import served_weights


@dataclass(frozen=True)
class Kill:
    """One killed life: where it started, how far it got, what the kill left."""

    newest_before: int  # the newest checkpoint's step before the life (-1: none)
    first_step: int | None  # the first step it reported (None: killed before one)
    reached: int  # the last step it reported (-1: none)
    newest_after: int
    candidates: int  # candidate folders after the kill
    moment: str  # when it was killed: "t+S s", "own step N" or "last step+S s"

    @property
    def lost(self) -> int:
        return max(0, self.reached - self.newest_after)

    @property
    def continued(self) -> bool | None:
        """Whether it continued the newest checkpoint; None: killed before its first step."""
        if self.first_step is None:
            return None
        return self.first_step == max(self.newest_before, 0) + 1


def _env(workdir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GENESIS_FP16_") and k != "ENABLE_FP16_TRAINING"
    }
    env.update(
        GENESIS_FP16_STATE_DIR=str(workdir / "state"),
        GENESIS_FP16_LOG_LEVEL="WARNING",
        GENESIS_FP16_LOG_INTERVAL="1",
    )
    return env


def _command(args: argparse.Namespace, data: Path, checkpoints: Path) -> list[str]:
    command = [sys.executable, "-m", "genesis_fp16", "train", args.agent, "--data", str(data)]
    command += ["--precision", args.precision, "--seed", "0"]
    command += ["--checkpoint-dir", str(checkpoints), "--resume", "--json", "--json-progress"]
    if args.steps is not None:
        rest = args.steps - max(_newest(checkpoints), 0) if args.form == "rest" else args.steps
        # No rest left (killed after its last save, before its verdict): --steps 0 is
        # refused, so a user asks the plain resume, which finishes a cut-short run.
        command += ["--steps", str(rest)] if rest > 0 else []
    if args.checkpoint_steps is not None:
        command += ["--checkpoint-steps", str(args.checkpoint_steps)]
    for option in args.option:
        command += ["--option", option]
    return command


def _candidates(checkpoints: Path) -> list[Path]:
    return sorted(p for p in (checkpoints / "candidates").glob("*") if p.is_dir())


def _newest(checkpoints: Path) -> int:
    """The newest step saved under ``checkpoints`` or any of its candidates; -1: none."""
    files = [f for d in (checkpoints, *_candidates(checkpoints)) for f in _files(d)]
    return max(int(f.name[5:15]) for f in files) if files else -1


def _files(folder: Path) -> list[Path]:
    return CheckpointManager(folder).checkpoints() if folder.is_dir() else []


@dataclass(frozen=True)
class Moment:
    """When a life is killed: ``seconds`` after its start, or once it reports its own
    ``own_step``-th step (or the job's ``last`` step, then ``end_delay`` s later)."""

    seconds: float | None
    own_step: int | None
    last: int | None
    end_delay: float

    def due(self, started: float, steps: list[int], at_last: list[float]) -> str | None:
        """Why the life is due now; None: not yet. ``at_last``: when it reported the last step."""
        now = time.monotonic()
        if self.seconds is not None:
            return f"t+{self.seconds:.1f} s" if now - started >= self.seconds else None
        if self.own_step is not None and len(steps) >= self.own_step:
            return f"own step {self.own_step}"
        if at_last and now - at_last[0] >= self.end_delay:
            return f"last step+{self.end_delay:.2f} s"
        return None


def _moment(args: argparse.Namespace, rng: random.Random) -> Moment:
    if args.steps is None or rng.random() < args.time_share:
        return Moment(rng.uniform(0.0, args.max_delay), None, None, 0.0)
    span = args.span or max(1, 2 * args.steps // max(args.kills, 1))
    return Moment(None, rng.randint(1, span), args.steps, rng.uniform(0.0, args.end_delay))


def _life(
    command: list[str], env: dict[str, str], moment: Moment
) -> tuple[int | None, int, dict[str, Any] | None, str]:
    """(first step reported, last step reported, its result when it finished before the
    kill, when it was killed)."""
    child = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    started = time.monotonic()
    steps: list[int] = []
    at_last: list[float] = []
    last = [""]

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith('{"progress"'):
                steps.append(int(json.loads(line)["progress"]["step"]))
                if moment.last is not None and steps[-1] >= moment.last and not at_last:
                    at_last.append(time.monotonic())
            elif line.strip():
                last[0] = line

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    why = None
    while child.poll() is None and why is None:
        time.sleep(0.01)
        why = moment.due(started, steps, at_last)
    if why is None:  # it ended on its own
        reader.join(5)
        if child.returncode != 0:
            sys.exit(f"train exited {child.returncode} before its kill")
        return (steps[0] if steps else None), steps[-1] if steps else -1, json.loads(last[0]), ""
    child.send_signal(signal.SIGKILL)
    child.wait()
    reader.join(5)
    return (steps[0] if steps else None), (steps[-1] if steps else -1), None, why


def _judged(checkpoints: Path) -> dict[str, Any] | None:
    """The job's end when its candidate (the newest) has its verdict, as a result would
    say it (its newest checkpoint, the gate's outcome); None while it has none. Another
    forced ``--steps N`` would then train N more, on top of the served model."""
    candidates = _candidates(checkpoints)
    if not candidates or not (candidates[-1] / "verdict.json").is_file():
        return None
    verdict = json.loads((candidates[-1] / "verdict.json").read_text())
    newest = _files(candidates[-1])[-1]
    return {"checkpoint": str(newest), "gate": {"outcome": verdict.get("outcome")}}


def _finish(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"train exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="se_darwin")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=None, help="the job's target step")
    parser.add_argument(
        "--form",
        choices=("same", "rest"),
        default="same",
        help="each life asks --steps TARGET (same) or --steps TARGET-newest (rest)",
    )
    parser.add_argument("--count", type=int, default=5000, help="records of generated data")
    parser.add_argument("--checkpoint-steps", type=int, default=None)
    parser.add_argument("--max-delay", type=float, default=20.0, help="a timed kill's bound")
    parser.add_argument("--time-share", type=float, default=0.25, help="share of timed kills")
    parser.add_argument("--span", type=int, default=None, help="a step kill's bound")
    parser.add_argument("--end-delay", type=float, default=3.0, help="after the last step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the kills and summary")
    parser.add_argument(
        "--option", action="append", default=[], help="agent option KEY=VALUE (repeatable)"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        env = _env(work)
        data = work / "data"
        subprocess.run(
            [
                *(sys.executable, "-m", "genesis_fp16", "data", "generate"),
                *("--agent", args.agent, "--out", str(data), "--count", str(args.count)),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        broken = work / "broken"
        kills: list[Kill] = []
        final: dict[str, Any] | None = None
        while len(kills) < args.kills:
            before = _newest(broken)
            first, reached, final, why = _life(
                _command(args, data, broken), env, _moment(args, rng)
            )
            if final is not None:
                print(f"the run finished after {len(kills)} kills", flush=True)
                break
            kill = Kill(before, first, reached, _newest(broken), len(_candidates(broken)), why)
            kills.append(kill)
            print(json.dumps({"kill": len(kills), **asdict(kill), "lost": kill.lost}), flush=True)
            final = _judged(broken)
            if final is not None:  # killed after its verdict: the job had ended
                print(f"the job had ended when kill {len(kills)} came (its verdict written)")
                break
        if final is None:
            final = _finish(_command(args, data, broken), env)
        whole = _finish(_command(args, data, work / "whole"), env)
        a, b = (load_checkpoint(Path(str(r["checkpoint"]))) for r in (final, whole))
        lost = [k.lost for k in kills]
        summary = {
            "agent": args.agent,
            "precision": args.precision,
            "target": args.steps,
            "form": args.form,
            "checkpoint_steps": args.checkpoint_steps,
            "kills": len(kills),
            "finished_before_the_last_kill": len(kills) < args.kills,
            "killed_before_first_step": sum(k.continued is None for k in kills),
            "not_continued": [i + 1 for i, k in enumerate(kills) if k.continued is False],
            "lost_steps_median": statistics.median(lost) if lost else None,
            "lost_steps_max": max(lost) if lost else None,
            "lost_steps_total": sum(lost),
            "final_step": int(Path(str(final["checkpoint"])).name[5:15]),
            "unbroken_step": int(Path(str(whole["checkpoint"])).name[5:15]),
            "final_checkpoint": Path(str(final["checkpoint"])).name,
            "unbroken_checkpoint": Path(str(whole["checkpoint"])).name,
            "last_weights_bitwise_equal": _equal(a[keys.MODEL], b[keys.MODEL]),
            "served_weights_bitwise_equal": _equal(served_weights(a), served_weights(b)),
            "candidate_folders": [p.name for p in _candidates(broken)],
            "final_gate": (final.get("gate") or {}).get("outcome"),
        }
    print(json.dumps(summary), flush=True)
    if args.out is not None:
        lines = [
            json.dumps({"kill": i + 1, **asdict(k), "lost": k.lost}) for i, k in enumerate(kills)
        ]
        args.out.write_text("\n".join([*lines, json.dumps(summary)]) + "\n")


if __name__ == "__main__":
    main()
