"""What a flood of events in one agent's outbox costs another agent's deliveries.

Agent ``flood`` holds ``--flood`` events not handled yet (written directly, as a writer
leaves them); agent ``quiet`` makes one event every ``--interval`` seconds, ``--events``
in all. The daemon's delivery (genesis_fp16.events.delivery's DeliveryThread; on earlier
versions the single ``event-delivery`` thread) posts both to a loopback receiver.
Reported: each quiet event's delay from its making to its arrival, the flood agent's
prune (its outbox past ten times ``--keep``) and how many of its events arrived
meanwhile, and the process's peak RSS. Issue 69's bound: every quiet event within 5 s.

    python benchmarks/event_outbox_flood.py --flood 100000 \\
        --json benchmarks/results/event_outbox_flood_cpu-amd-epyc-2-cores.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.bench.measure import machine_slug
from genesis_fp16.events.delivery import Deliverer, DeliveryConfig
from genesis_fp16_infrastructure.agent_folder import outbox

try:  # a thread per agent and receiver, in genesis_fp16.events.workers until it joined delivery
    from genesis_fp16.events.workers import DeliveryThread  # type: ignore[import-not-found]
except ImportError:  # now, and before workers (one thread for every agent and receiver)
    from genesis_fp16.events.delivery import DeliveryThread  # type: ignore[attr-defined,no-redef]

BOUND_S = 5.0


class Arrivals:
    """A loopback receiver that answers 200 and notes each event's first arrival."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.count: dict[str, int] = {}
        lock = threading.Lock()
        arrivals = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with lock:
                    arrivals.first.setdefault(body["id"], time.monotonic())
                    arrivals.count[body["agent"]] = arrivals.count.get(body["agent"], 0) + 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def flood(state: Path, agent: str, count: int) -> float:
    """``count`` unhandled events in ``agent``'s outbox; the seconds it took."""
    start = time.perf_counter()
    root = outbox.outbox_of(state / "agents" / agent)
    root.mkdir(parents=True)
    for n in range(count):
        event_id = f"f{n:015x}"
        event = {
            "version": outbox.VERSION,
            "id": event_id,
            "agent": agent,
            "kind": "promote",
            "at": "2026-11-26T00:00:00Z",
            "at_s": 1.0,
            "order": n + 1,
            "data": {"n": n},
            "targets": None,
            "attempts": [],
        }
        (root / f"{event_id}.json").write_text(json.dumps(event))
    return time.perf_counter() - start


def measure(state: Path, args: argparse.Namespace) -> dict[str, Any]:
    made_s = flood(state, "flood", args.flood)
    receiver = Arrivals()
    config = DeliveryConfig(state, (receiver.url,), b"benchmark-secret-1234", keep=args.keep)
    thread = DeliveryThread(Deliverer(lambda: config))
    started = time.monotonic()
    thread.start()
    made: dict[str, float] = {}
    pruned_at = None
    try:
        for _ in range(args.events):
            event_id = outbox.record(state / "agents" / "quiet", "promote", {})
            made[event_id] = time.monotonic()
            time.sleep(args.interval)
        deadline = time.monotonic() + args.wait
        while time.monotonic() < deadline:
            if pruned_at is None and (outbox.read_state(state / "agents" / "flood") or {}).get(
                "dropped"
            ):
                pruned_at = time.monotonic() - started
            prunes = args.flood > 10 * args.keep
            if set(made) <= set(receiver.first) and (pruned_at is not None or not prunes):
                break
            time.sleep(0.05)
        flood_delivered = receiver.count.get("flood", 0)
        elapsed = time.monotonic() - started
    finally:
        thread.stop(60.0)
        receiver.close()
    delays = [receiver.first[i] - at for i, at in made.items() if i in receiver.first]
    return {
        "flood_events": args.flood,
        "flood_written_s": round(made_s, 1),
        "quiet_events": args.events,
        "quiet_arrived": len(delays),
        "quiet_delay_s_median": round(statistics.median(delays), 3) if delays else None,
        "quiet_delay_s_max": round(max(delays), 3) if delays else None,
        "quiet_within_bound": sum(d <= BOUND_S for d in delays),
        "flood_pruned_after_s": None if pruned_at is None else round(pruned_at, 1),
        "flood_delivered": flood_delivered,
        "window_s": round(elapsed, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=10)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--keep", type=int, default=1000)
    parser.add_argument("--wait", type=float, default=300.0, help="seconds, after the last")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    # An earlier version's thread may still write when the window ends: cleanup is best effort.
    with tempfile.TemporaryDirectory(dir=args.dir, ignore_cleanup_errors=True) as tmp:
        row = measure(Path(tmp), args)
    record = {
        "machine": machine_slug(torch.device("cpu")),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_1_5_15_before": load_before,
        "load_average_1_5_15_after": os.getloadavg(),
        "python": platform.python_version(),
        "delivery": DeliveryThread.__module__,
        **row,
    }
    print(json.dumps(record, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
