"""Issue 29, item 2, attacked: second daemons and `train` runs against a running daemon's
state folder, then kill -9 and restart, counting refusals and take-overs.

    .venv/bin/python benchmarks/state_lock_attack.py

Uses the test suite's daemon harness and its fixture agent (200-step runs every 5 s).
Prints what it counted; the figures of one run are in the session note of issue 29.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "genesis_fp16"))
from daemon_harness import daemon_env, free_port, start_daemon

ENV = {
    "GENESIS_FP16_PLUGIN_ALLOWLIST": "fixture_good",
    "GENESIS_FP16_STEPS_PER_RUN": "200",
    "GENESIS_FP16_SAMPLE_COUNT": "64",
    "GENESIS_FP16_SCHEDULE": "5",
    "FIXTURE_STEP_SECONDS": "0.02",
}
ROUNDS, BATCH, RESTARTS = 5, 4, 10


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="state-lock-attack-"))
    started = time.monotonic()
    daemon = start_daemon(work, ENV)

    def cli(*args: str) -> subprocess.Popen[str]:
        env = daemon_env({**ENV, "GENESIS_FP16_METRICS_PORT": str(free_port())})
        command = [sys.executable, "-m", "genesis_fp16", *args]
        return subprocess.Popen(
            command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    results: dict[str, list[tuple[int, int, bool, float]]] = {"serve": [], "train": []}
    for _ in range(ROUNDS):
        procs = [("serve", cli("serve")) for _ in range(BATCH)]
        procs += [
            ("train", cli("train", "fixture_good", "--resume", "--steps", "50"))
            for _ in range(BATCH)
        ]
        batch_start = time.monotonic()
        for kind, proc in procs:
            try:
                _, err = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                err += " [TIMEOUT: not refused]"
            lines = [line for line in err.splitlines() if line.strip()]
            named = f"pid {daemon.process.pid}" in err
            results[kind].append(
                (proc.returncode, len(lines), named, time.monotonic() - batch_start)
            )
    for kind, rows in results.items():
        codes: dict[int, int] = {}
        for code, *_ in rows:
            codes[code] = codes.get(code, 0) + 1
        print(
            f"{kind}: {len(rows)} attempts, exit codes {codes}, "
            f"one line {sum(n == 1 for _, n, _, _ in rows)}, naming the pid "
            f"{sum(named for _, _, named, _ in rows)}, slowest refusal "
            f"{max(t for *_, t in rows):.1f} s (a batch of {2 * BATCH} at once)"
        )
    success = daemon.sample(
        "genesis_fp16_training_runs_total", agent="fixture_good", outcome="success"
    )
    failed = daemon.sample(
        "genesis_fp16_training_runs_total", agent="fixture_good", outcome="failed"
    )
    print(
        f"daemon /readyz {daemon.get('/readyz')[0]}; runs meanwhile: {success} ok, {failed} failed"
    )
    took, seconds = 0, []
    for _ in range(RESTARTS):
        daemon.process.kill()
        daemon.process.wait()
        begun = time.monotonic()
        try:
            daemon = start_daemon(work, ENV)
        except AssertionError as exc:
            print("restart failed:", str(exc)[-300:])
            continue
        took += 1
        seconds.append(time.monotonic() - begun)
    seconds.sort()
    print(
        f"kill -9 and restart: {RESTARTS} tries, {took} took the folder, ready in "
        f"{seconds[0]:.1f} / {seconds[len(seconds) // 2]:.1f} / {seconds[-1]:.1f} s"
        " (min/median/max)"
    )
    daemon.stop()
    print(f"total {time.monotonic() - started:.0f} s; folder {work}")


if __name__ == "__main__":
    main()
