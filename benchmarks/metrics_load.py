"""Load on the daemon's /metrics: many concurrent scrapers, then a thousand idle sockets.

Starts the real ``genesis-fp16 serve`` (built-in agents, generated sample data) in a
temporary folder, then:

1. ``wrk`` (Debian package ``wrk``) with ``--connections`` concurrent keep-alive
   scrapers for ``--seconds`` on /metrics: latency percentiles, requests, errors;
2. ``--idle`` idle TCP connections held open, then ``--scrapes`` fresh scrapes, each timed.

Run it while the first runs train (``--phase training``, the worst case: the training
thread shares the interpreter) or after they ended (``--phase idle``)::

    python benchmarks/metrics_load.py --phase training --out benchmarks/results/x.md
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(port: int, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _runs_finished(port: int) -> float:
    text = _get(port, "/metrics")[1].decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("genesis_fp16_training_runs_total{")
    )


def _start_daemon(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(
        GENESIS_FP16_METRICS_PORT=str(port),
        GENESIS_FP16_LOG_FORMAT="json",
        GENESIS_FP16_SCHEDULE="3600",
    )
    command = [str(Path(sys.executable).with_name("genesis-fp16")), "serve"]
    log = (workdir / "daemon.log").open("wb")
    return subprocess.Popen(command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait(predicate, what: str, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"metrics_load: timed out waiting for {what}")


def _wrk(port: int, connections: int, seconds: int) -> dict[str, str]:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("metrics_load: wrk is not installed (apt-get install wrk)")
    url = f"http://127.0.0.1:{port}/metrics"
    out = subprocess.run(
        [wrk, "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "5s", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures = {"raw": out}
    for label in ("50%", "90%", "99%"):
        found = re.search(rf"^\s+{re.escape(label)}\s+(\S+)", out, re.M)
        figures[f"p{label[:-1]}"] = found.group(1) if found else "?"
    figures["max"] = re.search(r"Latency\s+\S+\s+\S+\s+(\S+)", out).group(1)  # type: ignore[union-attr]
    figures["requests"] = re.search(r"(\d+) requests in", out).group(1)  # type: ignore[union-attr]
    errors = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    figures["errors"] = errors.group(1) if errors else "none"
    figures["non_2xx"] = non2xx.group(1) if non2xx else "0"
    return figures


def _idle_then_scrape(port: int, idle: int, scrapes: int) -> list[float]:
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(idle)]
    try:
        times = []
        for _ in range(scrapes):
            started = time.perf_counter()
            status, _ = _get(port, "/metrics")
            if status != 200:
                raise SystemExit(f"metrics_load: scrape with {idle} idle sockets gave {status}")
            times.append(time.perf_counter() - started)
        return times
    finally:
        for sock in held:
            sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=("training", "idle"), default="training")
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    port = _free_port()
    with tempfile.TemporaryDirectory() as folder:
        daemon = _start_daemon(Path(folder), port)
        try:
            _wait(lambda: _get(port, "/readyz")[0] == 200, "/readyz", 300)
            if args.phase == "idle":
                _wait(lambda: _runs_finished(port) >= 2, "the first runs to end", 1800)
            loaded = _wrk(port, args.connections, args.seconds)
            idle_times = _idle_then_scrape(port, args.idle, args.scrapes)
            still_training = _runs_finished(port) < 2
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
    summary = {
        "phase": args.phase,
        "training_during_idle_test": still_training,
        "connections": args.connections,
        "seconds": args.seconds,
        **{k: v for k, v in loaded.items() if k != "raw"},
        "idle_sockets": args.idle,
        "idle_scrape_ms_median": round(1000 * statistics.median(idle_times), 1),
        "idle_scrape_ms_max": round(1000 * max(idle_times), 1),
    }
    print(json.dumps(summary))
    if args.out is not None:
        with args.out.open("a") as out:
            out.write(f"```\n{json.dumps(summary, indent=1)}\n{loaded['raw']}```\n")


if __name__ == "__main__":
    main()
