"""Load on all the daemon's scraped pages at once: /metrics, the page at / and /status.json.

Starts the real ``genesis-fp16 serve`` in a temporary folder with one long run of the
built-in ``rlhf_ppo`` (``--steps``, generated sample data), waits for its first optimizer
step, then runs ``--scrapers`` concurrent clients for ``--seconds`` while it trains: each
holds one keep-alive connection and asks for /metrics, / and /status.json in turn (each
client starts at a different one of the three), ``--interval`` seconds apart. With
``--interval 0`` a closed loop (a new request only when the last is answered: the
latencies are the queue 200 clients make, and the load is what the machine can serve);
with ``--interval 1`` each client scrapes once a second, as a crowd of Prometheus
servers would (their first requests all at once, each next one a second later).

Reported, per path and over all: requests, p50, p99 and the slowest latency (from the
request's first byte sent to its body's last byte read), errors (a connection refused,
reset or timed out, or a status other than 200) and answers without
``X-Content-Type-Options: nosniff``; and the optimizer steps the daemon took meanwhile
(the proof that it trained under the load). The client shares the machine's cores with
the daemon and its run: on 2 cores its own cost is in the figures::

    python benchmarks/http_load.py --interval 1 --out benchmarks/results/http_load_61.md
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PATHS = ("/metrics", "/", "/status.json")
# A refused, reset or timed-out connection, an answer cut short, a head that is not HTTP.
_FAILED = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _steps(port: int) -> float:
    """The daemon's optimizer steps so far, over all agents."""
    text = _get(port, "/metrics")[1].decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("genesis_fp16_optimizer_steps_total{")
    )


def _training(pid: int) -> bool:
    """Whether the daemon has a run's child (``genesis_fp16 train``) alive now (Linux /proc)."""
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            children += (task / "children").read_text().split()
    for child in children:
        with contextlib.suppress(OSError):
            if b"\0train\0" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
    return False


def _start_daemon(workdir: Path, port: int, steps: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(
        GENESIS_FP16_METRICS_PORT=str(port),
        GENESIS_FP16_LOG_FORMAT="json",
        GENESIS_FP16_PLUGIN_ALLOWLIST="rlhf_ppo",
        GENESIS_FP16_AGENTS__RLHF_PPO__STEPS=str(steps),  # one run that outlasts the load
        GENESIS_FP16_SCHEDULE="3600",
        GENESIS_FP16_LOG_INTERVAL="10",  # progress (and its metrics) every 10 steps
    )
    command = [str(Path(sys.executable).with_name("genesis-fp16")), "serve"]
    log = (workdir / "daemon.log").open("wb")
    return subprocess.Popen(command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait(predicate: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:  # not listening yet
            pass
        time.sleep(0.5)
    raise SystemExit(f"http_load: timed out waiting for {what}")


class Tally:
    """Every request's latency by path, and what went wrong."""

    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = {path: [] for path in PATHS}
        self.errors: dict[str, int] = {}
        self.without_nosniff = 0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def _ask(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> tuple[int, bool]:
    """One keep-alive GET: its status and whether it said nosniff."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    status = int(head.split(" ", 2)[1])
    length = int(head.split("content-length:", 1)[1].split("\r\n", 1)[0])
    await reader.readexactly(length)
    return status, "x-content-type-options: nosniff" in head


async def _scraper(port: int, first: int, until: float, interval: float, tally: Tally) -> None:
    reader = writer = None
    turn = first
    while time.monotonic() < until:
        if turn > first:
            await asyncio.sleep(interval)
        path = PATHS[turn % len(PATHS)]
        turn += 1
        started = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert reader is not None
            status, nosniff = await asyncio.wait_for(_ask(reader, writer, path), 10)
        except _FAILED as exc:
            tally.error(type(exc).__name__)
            if writer is not None:
                writer.close()
            reader = writer = None
            continue
        tally.latencies[path].append(time.perf_counter() - started)
        if status != 200:
            tally.error(f"status {status}")
        tally.without_nosniff += not nosniff
    if writer is not None:
        writer.close()


async def _load(port: int, scrapers: int, seconds: float, interval: float) -> Tally:
    tally = Tally()
    until = time.monotonic() + seconds
    await asyncio.gather(*(_scraper(port, n, until, interval, tally) for n in range(scrapers)))
    return tally


def _figures(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {"requests": 0}
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {
        "requests": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 1),
        "p99_ms": round(1000 * p99, 1),
        "max_ms": round(1000 * ordered[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument(
        "--interval", type=float, default=1.0, help="seconds between a client's asks"
    )
    parser.add_argument("--steps", type=int, default=100_000, help="the training run's steps")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    port = _free_port()
    with tempfile.TemporaryDirectory() as folder:
        daemon = _start_daemon(Path(folder), port, args.steps)
        try:
            _wait(lambda: _get(port, "/readyz")[0] == 200, "/readyz", 300)
            _wait(lambda: _steps(port) > 0, "the first optimizer step", 600)
            before, trained = _steps(port), [_training(daemon.pid)]
            tally = asyncio.run(_load(port, args.scrapers, args.seconds, args.interval))
            after = _steps(port)
            trained.append(_training(daemon.pid))
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
    summary = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "scrapers": args.scrapers,
        "seconds": args.seconds,
        "interval": args.interval,
        "load_average_1min": round(os.getloadavg()[0], 1),  # other work on the machine
        "all": _figures([t for times in tally.latencies.values() for t in times]),
        **{path: _figures(times) for path, times in tally.latencies.items()},
        "errors": tally.errors,
        "without_nosniff": tally.without_nosniff,
        "run_child_alive_at_start_and_end": trained,
        "optimizer_steps_reported_during_load": after - before,  # at the run's log interval
    }
    print(json.dumps(summary))
    if args.out is not None:
        with args.out.open("a") as out:
            out.write(f"```\n{json.dumps(summary, indent=1)}\n```\n")


if __name__ == "__main__":
    main()
