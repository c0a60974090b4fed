"""A daemon run's anatomy: each phase's seconds as the pool grows and as what is new grows.

Issue 90 item 7. For each tree, device, pool size P and count of new records n, it
starts a real ``genesis-fp16 serve`` (``daemon_judging_cost.py``'s daemon: fp32, the
agent alone, every run asked for by ``genesis-fp16 run``), with data written by
``genesis-fp16 data generate``: a first model on P - n records (seed 99), then the
measured run after n more (seed 3099), each at the same fixed ``--steps``. Every figure
comes from the daemon's own ``training run finished`` line: its ``phases`` (read, drift,
encode, train, eval, live, gate, whatever the tree's daemon reports), its ``wall_seconds``
(the run) and ``duration_seconds`` (the job). Nothing is timed from outside.

- **new**: ``--new`` (``1%``: of the pool; ``1000``: a count), and at each pool the
  1% of every larger pool in ``--pools``, so that the issue's ratios compare the same
  new records: 100,000 over 10,000 at 1,000 new; 1,000,000 over 100,000 at 10,000 new.
- **everything but train**: the run's ``wall_seconds`` less its ``train`` phase (what
  the phases do not name counts too: ``unattributed``, the wall less every phase).
- **devices**: the CPU, and CUDA when torch sees one (``GENESIS_FP16_DEVICE``);
  ``--devices cuda`` (or ``cuda,cpu``) names them, in the order measured.
- **trees**: ``--trees`` runs another checkout's daemon (its ``genesis_fp16``,
  ``agents`` and ``infrastructure`` first on ``PYTHONPATH``) on the same data, written
  once by this tree's ``data generate``. A phase one tree's line lacks is shown as
  missing, not as zero.
- ``--million`` adds the 1,000,000 pool (minutes of data generation and reads). A batch
  of more than ``CHUNK`` records is written as chunks, each by its own ``data generate``
  of its own seed (``_pool_batch``), joined into the one pool file a smaller batch is:
  one ``data generate`` of 1,000,000 records holds them all in memory at once (8 GB and
  more).
- **memory**: after the measured run, each process of the daemon's (the daemon, its run
  worker, the resident run process) with its peak resident bytes (``VmHWM``) and its
  resident bytes then (``VmRSS``: what the resident run process keeps between runs).
- **modes**: ``--modes fresh`` (the default) runs each measured run in a daemon of its
  own, its first run after a start; ``later`` runs the first and the measured run in one
  daemon, the measured run the second its resident run process serves (what that
  process kept of the first run's read, ``GENESIS_FP16_RUN_RESIDENT_KEEP_MIB``, is
  there): the product's case for every run after a daemon's first. ``watched`` runs
  three in one daemon: the first on ``pool`` less twice ``new`` records, a second after
  a middle batch of ``new`` (seed ``SEEDS[1]``), then the measured run after the new
  ones, at the same pool. When the second run's gate promotes, the model the measured
  run judges against has a predecessor, so its live watch scores the new records with
  that one too, runs its test and A/A self-test and writes its figures: the steady state
  of an agent that has promoted twice, which ``later`` does not reach (its served model
  has no predecessor, and the watch returns at once). Every row says each run's gate
  (``gates``) and whether the measured run's watch wrote figures (``watched``).

Writes ``--out`` ``.json`` (every row's finished line's figures, the commit of each tree,
the host, torch, the load average before and after) and ``.md``::

    python benchmarks/run_anatomy.py --pools 10000,100000 --new 1%,25% --steps 200 \
        --trees .,../base --out benchmarks/results/run_anatomy_90_<host>

se_darwin only: its pool grows by files, as the issue's pools do; rlhf_ppo's data is one
task file replaced by the next (``daemon_judging_cost.py``), which has no "new records".
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shlex
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from daemon_judging_cost import ARRIVED_BEFORE_S, SEEDS, _batch, _env, _runs
from judged_cases import _commit

from genesis_fp16.bench.measure import device_name

TREE = Path(__file__).resolve().parents[1]
BOUND = 1.5  # the ceiling on each ratio of everything but train
CHUNK = 100_000  # the most records one ``data generate`` writes (about 0.8 GB resident)


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def new_counts(pools: list[int], new: list[str]) -> dict[int, list[int]]:
    """The counts of new records measured at each pool: ``new`` (``N%`` of the pool, or a
    count), and 1% of each larger pool (the ratios' same new records).

    >>> new_counts([10000, 100000], ["1%", "25%"])
    {10000: [100, 1000, 2500], 100000: [1000, 25000]}
    """
    counts: dict[int, list[int]] = {}
    for pool in pools:
        each = {round(pool * float(n[:-1]) / 100) if n.endswith("%") else int(n) for n in new}
        each |= {larger // 100 for larger in pools if larger > pool}
        counts[pool] = sorted(n for n in each if 0 < n < pool)
    return counts


def chunk_sizes(count: int) -> list[int]:
    """The records of each chunk of a batch of ``count``.

    >>> chunk_sizes(250_000)
    [100000, 100000, 50000]
    """
    return [min(CHUNK, count - start) for start in range(0, count, CHUNK)]


def _ids(part: Path) -> list[str]:
    return re.findall(r'"trajectory_id": "([^"]*)"', part.read_text())


def join_pools(parts: list[Path], target: Path) -> int:
    """Write the pool files ``parts`` as one pool file ``target`` (their records in
    order, counts summed), a part in memory at a time; its count of records. Two records
    of one id stop it (a pool's object would keep one of them)."""
    marker, seen, total = '"trajectories": {', set[str](), dict[str, Any]()
    with target.open("w") as out:
        for number, part in enumerate(parts):
            text = part.read_text()
            at = text.index(marker)
            head = json.loads(text[:at] + marker + "}}")
            ids = _ids(part)
            if len(seen) + len(ids) != len(seen | set(ids)):
                raise SystemExit(f"{part}: a trajectory id another chunk holds; another seed")
            seen.update(ids)
            if number == 0:
                total.update(head)
            else:
                for key in ("max_trajectories", "total_added", "total_pruned"):
                    total[key] += head[key]
            body = text[at + len(marker) : -2]  # the records, without the two closing braces
            out.write(("" if number == 0 else ", ") + body)
            del text, body
    joined = json.dumps({**total, "trajectories": {}})  # the head: counts known at the end
    final = target.with_suffix(".joined")
    with final.open("w") as out, target.open() as records:
        out.write(joined[:-2])
        shutil.copyfileobj(records, out, 2**24)
        out.write("}}")
    final.replace(target)
    return len(seen)


def _pool_batch(agent: str, folder: Path, env: dict[str, str], count: int, seed: int) -> None:
    """``_batch``'s one pool file of ``count`` records, written in chunks (``CHUNK``): the
    first of seed ``seed``, each next of the next seed ``seed`` * 1000 + k (k = 1, 2, ...)
    whose records' ids no earlier chunk holds (40 random bits an id: at 1,000,000
    records two chunks do share one now and then; that chunk is written again, of the
    next seed). A chunk already in ``folder/chunks`` of its size (a stopped run's, in
    ``--work``) is taken as it is: its seed and size make it the same."""
    sizes = chunk_sizes(count)
    if len(sizes) == 1:
        _batch(agent, folder, env, count, seed)
        return
    parts, seen, later = list[Path](), set[str](), itertools.count(1)
    for size in sizes:
        each = seed if not parts else seed * 1000 + next(later)
        while True:
            part = folder / "chunks" / "data" / f"pool-{each}.json"
            ids = _ids(part) if part.exists() else []
            if len(ids) != size:
                _batch(agent, folder / "chunks", env, size, each)
                ids = _ids(part)
            if seen.isdisjoint(ids):
                break
            part.unlink()
            each = seed * 1000 + next(later)
        seen.update(ids)
        parts.append(part)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    target = folder / "data" / f"pool-{seed}.json"
    if join_pools(parts, target) != count:
        raise SystemExit(f"{target}: not {count} records")
    shutil.rmtree(folder / "chunks")
    stamp = os.stat(target).st_mtime - ARRIVED_BEFORE_S
    os.utime(target, (stamp, stamp))


def memory(pid: int) -> list[dict[str, Any]]:
    """``pid`` and each of its descendants: its parent, its command, its peak resident
    bytes (``VmHWM``) and its resident bytes now (``VmRSS``)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:  # the parent: stat's 2nd field after the command's closing parenthesis
                after_command = (entry / "stat").read_text().rsplit(")", 1)[1]
                parents[int(entry.name)] = int(after_command.split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    found, wanted = [], [pid]
    while wanted:
        each = wanted.pop(0)
        wanted += sorted(child for child, parent in parents.items() if parent == each)
        try:
            status = (Path("/proc") / str(each) / "status").read_text()
            command = (Path("/proc") / str(each) / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        kib = dict(re.findall(r"^(VmHWM|VmRSS):\s+(\d+) kB", status, re.MULTILINE))
        found.append(
            {
                "pid": each,
                "parent": parents.get(each),
                "command": command.decode(errors="replace").strip()[-120:],
                "peak_rss_bytes": int(kib.get("VmHWM", 0)) * 1024,
                "rss_bytes": int(kib.get("VmRSS", 0)) * 1024,
            }
        )
    return found


KEEP_MIB: list[str] = []  # --keep-mib: GENESIS_FP16_RUN_RESIDENT_KEEP_MIB, when given
NEW_PREFIX: list[str] = []  # --new-after: the new files' names prefixed to sort last


def _tree_env(agent: str, folder: Path, tree: Path, device: str, steps: int) -> dict[str, str]:
    env = _env(agent, folder)
    if KEEP_MIB:
        env["GENESIS_FP16_RUN_RESIDENT_KEEP_MIB"] = KEEP_MIB[0]
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(str(tree / p) for p in ("", "agents", "infrastructure")),
            "GENESIS_FP16_DEVICE": device,
            f"GENESIS_FP16_AGENTS__{agent.upper()}__STEPS": str(steps),
            "GENESIS_FP16_METRICS_PORT": _free_port(),
            # The tree's own packages, not this working directory's (``python -m`` puts
            # the working directory first on sys.path).
            "PYTHONSAFEPATH": "1",
        }
    )
    return env


def _row(finished: dict[str, Any], first: dict[str, Any]) -> dict[str, Any]:
    """One measured run's figures, every one from its finished line."""
    phases = finished.get("phases") or {}
    wall = finished["wall_seconds"]
    return {
        "phases": phases,
        "wall_seconds": wall,
        "duration_seconds": finished["duration_seconds"],
        # Of the job: each measured daemon is fresh, so its first run starts the run worker.
        "worker_start": finished.get("worker_start"),
        # Absent train (an up-to-date run): everything was not train.
        "but_train": wall - phases.get("train", 0.0),
        "unattributed": wall - sum(phases.values()),
        "outcome": finished.get("outcome"),
        "gate": (finished.get("gate") or {}).get("outcome"),
        "steps": finished.get("steps"),
        "data": finished.get("data"),
        "first": {k: first.get(k) for k in ("phases", "wall_seconds", "outcome", "steps")},
    }


MODES = {"fresh": 1, "later": 1, "watched": 2}  # each mode's runs before the measured one


def _runs_then_new(
    agent: str,
    made: Path,
    folder: Path,
    env: dict[str, str],
    mode: str = "fresh",
    after_old: bool | None = None,
) -> tuple[list[dict[str, Any]], list[float], list[dict[str, Any]]]:
    """The first run on ``made``'s old records (``watched``: then a second after its
    ``middle`` batch), then the measured run after its new ones: their finished lines,
    the load average before the measured run, and the daemon's processes' memory after it
    (``memory``). ``fresh``: the first and the measured run each by a daemon of its own;
    ``later`` and ``watched``: every run by one daemon, so the measured run is served by
    the resident run process that read the earlier ones' records. ``after_old``: the
    later batches' files named to sort after the old ones (``zy-``, ``zz-``; None: as
    ``--new-after`` says)."""
    shutil.copytree(made / "old" / "data", folder / "data")
    load: list[float] = []
    held: list[dict[str, Any]] = []
    before = MODES[mode]
    after_old = bool(NEW_PREFIX) if after_old is None else after_old

    def measure_memory(pid: int) -> None:
        held[:] = memory(pid)

    def arrive(done: int) -> None:
        if not done:
            return
        batch, prefix = ("new", "zz-") if done == before else ("middle", "zy-")
        for file in (made / batch / "data").iterdir():
            named = (prefix if after_old else "") + file.name  # sorted after the old ones
            shutil.copy2(file, folder / "data" / named)  # its date (a minute back) kept
        if done == before:
            load.extend(_load())

    if mode != "fresh":
        return _runs(agent, folder, env, before + 1, arrive, measure_memory), load, held
    (first,) = _runs(agent, folder, env, 1)
    arrive(1)
    (finished,) = _runs(agent, folder, env, 1, None, measure_memory)
    return [first, finished], load, held


def watched(folder: Path, agent: str) -> bool:
    """Whether a live watch wrote figures of new records into the agent's pointer (the
    served entry's, or a history entry's once the measured run promoted): only the
    measured run's watch can have, as no earlier model had a predecessor."""
    pointer = json.loads(
        (folder / "state" / "agents" / agent / "checkpoints" / "served.json").read_text()
    )
    entries = [pointer.get("served") or {}, *(pointer.get("history") or [])]
    return any((entry.get("live") or {}).get("new_records") for entry in entries)


def write_data(
    agent: str, root: Path, pool: int, new: int, steps: int, middle: bool = False
) -> Path:
    """``root/data-POOL-NEW``: the first run's ``old`` records (``pool`` less ``new``) and
    the measured run's ``new`` ones, each a pool file of its own seed. ``middle``:
    ``root/data-POOL-NEW-middle``, whose old records are ``new`` fewer, with a ``middle``
    batch of ``new`` records (seed ``SEEDS[1]``) for a second run, so that the measured
    run's pool is ``pool`` records all the same."""
    made = root / (f"data-{pool}-{new}" + ("-middle" if middle else ""))
    env = _tree_env(agent, made, TREE, "cpu", steps)
    _pool_batch(agent, made / "old", env, pool - new * (2 if middle else 1), SEEDS[0])
    if middle:
        _pool_batch(agent, made / "middle", env, new, SEEDS[1])
    _pool_batch(agent, made / "new", env, new, SEEDS[2])
    return made


def measure(
    agent: str,
    trees: list[Path],
    devices: list[str],
    counts: dict[int, list[int]],
    steps: int,
    root: Path,
    modes: list[str],
    keep_data: bool = False,
) -> Iterator[dict[str, Any]]:
    """Every row: for each pool and new count, the data written once (twice with
    ``watched`` among other modes: its old records are fewer), then for each tree, device
    and mode the runs before the measured run and that run (``fresh``: each by a daemon
    of its own; ``later``, ``watched``: all by one, in one resident run process). ``keep_data``:
    each pool's data is left in ``root`` (``data-POOL-NEW``) for a profile, with each
    daemon's log (``daemon-NUMBER-DEVICE-MODE-POOL-NEW.log``)."""
    commits = {tree: _commit(tree) for tree in trees}
    for pool, news in counts.items():
        for new in news:
            made = {
                middle: write_data(agent, root, pool, new, steps, middle)
                for middle in sorted({mode == "watched" for mode in modes})
            }
            for (number, tree), device, mode in itertools.product(enumerate(trees), devices, modes):
                folder = root / f"{number}-{device}-{mode}-{pool}-{new}"
                env = _tree_env(agent, folder, tree, device, steps)
                runs, load, held = _runs_then_new(agent, made[mode == "watched"], folder, env, mode)
                yield {
                    "tree": str(tree),
                    "commit": commits[tree],
                    "agent": agent,
                    "device": device,
                    "mode": mode,
                    "pool": pool,
                    "new": new,
                    "loadavg_before": load,
                    **_row(runs[-1], runs[0]),
                    "gates": [(run.get("gate") or {}).get("outcome") for run in runs],
                    "watched": watched(folder, agent),
                    "memory": held,
                }
                if keep_data:  # the daemon's log beside the data, for what it kept or evicted
                    kept = made[mode == "watched"]
                    shutil.copy(folder / "daemon.log", kept / f"daemon-{folder.name}.log")
                shutil.rmtree(folder)
            if not keep_data:
                for each in made.values():
                    shutil.rmtree(each)


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Everything but train at each pool over that at the next smaller pool, the same
    new records (1% of the larger pool): per commit, agent and device.

    Beside each ratio, what the issue lets grow with the pool: ``eval_growth``, the eval
    phase's seconds at the larger pool less the smaller's (the candidate's forward over
    its held-out part, the one part the issue says must grow), against ``headroom``, the
    growth the bound leaves (``BOUND - 1`` times the smaller pool's everything but train);
    and ``ratio_rest``, the ratio with eval's growth set aside (None where a row's line
    names no eval phase). The verdict (``within_1_5``) is the ratio's, as the issue asks."""

    def which(r: dict[str, Any]) -> tuple[str, str, str, str]:
        return (r["commit"], r["agent"], r["device"], r.get("mode", "fresh"))

    by = {(*which(r), r["pool"], r["new"]): r for r in rows}
    found = []
    for run in dict.fromkeys(map(which, rows)):
        pools = sorted({r["pool"] for r in rows if which(r) == run})
        for small, big in itertools.pairwise(pools):
            low, high = by.get((*run, small, big // 100)), by.get((*run, big, big // 100))
            if low is None or high is None:
                continue
            ratio = high["but_train"] / low["but_train"]
            evals = [r["phases"].get("eval") for r in (low, high)]
            grew = None if None in evals else evals[1] - evals[0]
            found.append(
                {
                    "commit": run[0],
                    "agent": run[1],
                    "device": run[2],
                    "mode": run[3],
                    "pools": [small, big],
                    "new": big // 100,
                    "but_train": [low["but_train"], high["but_train"]],
                    "ratio": ratio,
                    "within_1_5": ratio <= BOUND,
                    "eval_growth": grew,
                    "headroom": (BOUND - 1) * low["but_train"],
                    "ratio_rest": None
                    if grew is None
                    else (high["but_train"] - grew) / low["but_train"],
                }
            )
    return found


def phase_names(rows: list[dict[str, Any]]) -> list[str]:
    """Every phase any row's finished line named, in the order the lines name them."""
    return list(dict.fromkeys(name for row in rows for name in row["phases"]))


def _memory_cells(row: dict[str, Any]) -> str:
    """Peak MiB, kept MiB and kept bytes a record of the daemon's process that peaked
    highest (the resident run process): the last less its parent's resident bytes (the
    run worker it was forked from: torch and the library) over the pool; — where the
    row has no memory figures."""
    held = row.get("memory")
    if not held:
        return "— | — | — |"
    top = max(held, key=lambda p: p["peak_rss_bytes"])
    peak, kept = top["peak_rss_bytes"], top["rss_bytes"]
    base = next((p["rss_bytes"] for p in held if p["pid"] == top.get("parent")), 0)
    return f"{peak / 2**20:,.0f} | {kept / 2**20:,.0f} | {(kept - base) / row['pool']:,.0f} |"


def _yes(said: bool | None) -> str:
    return "—" if said is None else "yes" if said else "no"


def markdown(result: dict[str, Any]) -> str:
    rows, names = result["rows"], phase_names(result["rows"])
    host = result["host"]
    lines = [
        "# A daemon run's anatomy (issue 90)",
        "",
        f"`{result['command']}`; host {host['cpu']} ({host['cores']} cores), "
        f"{host['platform']}, torch {result['torch']}, {result['steps']} steps a run, "
        f"fp32, one torch thread. Load average {' '.join(map(str, result['loadavg_before']))} "
        f"before, {' '.join(map(str, result['loadavg_after']))} after.",
        "",
        *([result["note"], ""] if result["note"] else []),
        "Seconds, each from the measured run's own `training run finished` line; `—`: the "
        "phase is not in that commit's line. run: its `wall_seconds`; job: its "
        "`duration_seconds` (the run worker started, as each measured daemon is fresh, "
        "the child forked, the run, its result recorded); but train: run less train; "
        "unattributed: run less every phase. Peak and kept MiB: the daemon's largest "
        "process after the measured run (the resident run process): its peak resident "
        "memory (`VmHWM`) and its resident memory then (`VmRSS`); kept bytes a record: "
        "that less its parent's (the run worker it was forked from), over the pool. "
        "watched: whether the measured run's live watch wrote figures (it has a "
        "predecessor to score with only in `watched` mode, once the middle run promoted).",
        "",
        "| commit | device | mode | pool | new | outcome | watched | "
        + " | ".join(names)
        + " | run | job | unattributed | **but train** | load before | peak MiB | kept MiB "
        "| kept bytes a record |",
        "| --- " * (14 + len(names)) + "| --- |",
    ]
    for r in rows:
        shown = [f"{r['phases'][n]:.3f}" if n in r["phases"] else "—" for n in names]
        lines.append(
            f"| {r['commit']} | {r['device']} | {r.get('mode', 'fresh')} | {r['pool']:,} | "
            f"{r['new']:,} | "
            f"{r['outcome']}, {r['gate']} | {_yes(r.get('watched'))} | "
            + " | ".join(shown)
            + f" | {r['wall_seconds']:.3f} | "
            f"{r['duration_seconds']:.3f} | {r['unattributed']:.3f} | **{r['but_train']:.3f}** | "
            f"{r['loadavg_before'][0]:.2f} | {_memory_cells(r)}"
        )
    lines += [
        "",
        f"Everything but train at the larger pool over the smaller, the same new records "
        f"(issue 90's Done-when: ≤ {BOUND}). eval growth: the eval phase's seconds at the "
        f"larger pool less the smaller's (the candidate's forward over its held-out part, "
        f"which the issue says must grow); headroom: the growth the bound leaves "
        f"({BOUND - 1:g} × the smaller pool's but train); without eval's growth: the ratio "
        f"with that growth set aside (not the issue's verdict, which is the ratio's):",
        "",
        "| commit | device | mode | pools | new | but train, seconds | ratio | eval growth "
        "| headroom | without eval's growth |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for q in result["ratios"]:
        grew, rest = q["eval_growth"], q["ratio_rest"]  # None: a line without eval
        lines.append(
            f"| {q['commit']} | {q['device']} | {q.get('mode', 'fresh')} | "
            f"{q['pools'][1]:,} / {q['pools'][0]:,} | "
            f"{q['new']:,} | {q['but_train'][1]:.3f} / {q['but_train'][0]:.3f} | "
            f"**{q['ratio']:.2f}** ({'within' if q['within_1_5'] else 'over'}) | "
            + ("— | " if grew is None else f"{grew:.3f} | ")
            + f"{q['headroom']:.3f} | "
            + ("— |" if rest is None else f"{rest:.2f} |")
        )
    return "\n".join(lines) + "\n"


def _pools(args: argparse.Namespace) -> list[int]:
    return [int(p) for p in args.pools.split(",")] + ([1_000_000] if args.million else [])


def _devices(asked: str | None) -> list[str]:
    """The devices to measure on: ``--devices`` (comma-separated, in that order), else the
    CPU and CUDA when torch sees one. SystemExit in one line for CUDA where none is seen."""
    present = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    devices = present if asked is None else [d.strip() for d in asked.split(",") if d.strip()]
    missing = [d for d in devices if d not in present]
    if missing or not devices:
        raise SystemExit(f"run_anatomy: --devices {asked!r}: this host has {', '.join(present)}")
    return devices


def run(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Every row measured; the results written to ``--out`` after each (``complete``
    false until the last: a long run stopped early keeps what it measured)."""
    pools = _pools(args)
    devices = _devices(args.devices)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    result: dict[str, Any] = {
        "command": command,
        "commits": {str(tree): _commit(tree) for tree in trees},
        "host": {
            "cpu": device_name(torch.device("cpu")).rsplit(",", 1)[0],
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "gpu": torch.cuda.get_device_name() if "cuda" in devices else None,
        },
        "torch": torch.__version__,
        "steps": args.steps,
        "note": args.note,
        "loadavg_before": _load(),
        "complete": False,
        "rows": [],
    }
    counts = new_counts(pools, args.new.split(","))
    with tempfile.TemporaryDirectory(prefix="run-anatomy-") as name:
        modes, root = args.modes.split(","), args.work or Path(name)
        rows = measure(
            args.agent, trees, devices, counts, args.steps, root, modes, args.work is not None
        )
        for row in rows:
            print(json.dumps(row), file=sys.stderr, flush=True)
            result["rows"].append(row)
            _write(result, args.out)
    result["complete"] = True
    _write(result, args.out)
    return result


def _write(result: dict[str, Any], out: Path | None) -> None:
    result.update(loadavg_after=_load(), ratios=ratios(result["rows"]))
    if out is not None:
        Path(f"{out}.json").write_text(json.dumps(result, indent=1) + "\n")
        Path(f"{out}.md").write_text(markdown(result))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="se_darwin", choices=["se_darwin"])
    parser.add_argument("--pools", default="10000,100000", help="pool sizes, comma-separated")
    parser.add_argument("--million", action="store_true", help="add the 1,000,000 pool")
    parser.add_argument("--new", default="1%,25%", help="new records: N%% of the pool or counts")
    parser.add_argument("--steps", type=int, default=200, help="each run's fixed steps")
    parser.add_argument("--trees", default=str(TREE), help="checkouts to run, comma-separated")
    parser.add_argument(
        "--modes",
        default="fresh",
        help="fresh (a daemon per measured run), later (the measured run the second in one "
        "resident run process), watched (the third, after a middle batch: its live watch "
        "has a predecessor), comma-separated",
    )
    parser.add_argument(
        "--keep-mib",
        help="GENESIS_FP16_RUN_RESIDENT_KEEP_MIB of every daemon (0: its resident run "
        "process keeps nothing of a run's read; unset: the default)",
    )
    parser.add_argument(
        "--new-after",
        action="store_true",
        help="name the new pool file to sort after the old one (zz-pool-3099.json; by "
        "default pool-3099.json sorts before pool-99.json: a later read joins every file)",
    )
    parser.add_argument(
        "--devices",
        help="devices to measure on, comma-separated, in that order (cpu, cuda; by default "
        "the CPU, and CUDA when torch sees one)",
    )
    parser.add_argument("--note", default="", help="a line for the results (the host's load)")
    parser.add_argument("--out", type=Path, help="write OUT.json and OUT.md")
    parser.add_argument(
        "--work",
        type=Path,
        help="write the data and the daemons' folders here, and leave each pool's data "
        "(data-POOL-NEW) and its daemons' logs for a profile (by default a temporary "
        "directory, removed)",
    )
    args = parser.parse_args(argv)
    for tree in args.trees.split(","):
        if not (Path(tree) / "genesis_fp16" / "__main__.py").is_file():
            parser.error(f"--trees: {tree!r} is no checkout of this project (no genesis_fp16)")
    for new in args.new.split(","):
        number = new.removesuffix("%")
        if not (number.replace(".", "", 1).isdigit() and float(number) > 0):
            parser.error(f"--new: {new!r} is neither a share of the pool (1%) nor a count")
    if not set(args.modes.split(",")) <= set(MODES):
        parser.error(f"--modes: {args.modes!r}: fresh, later, watched, comma-separated")
    if "watched" in args.modes.split(",") and not all(
        0 < 2 * n < pool
        for pool, news in new_counts(_pools(args), args.new.split(",")).items()
        for n in news
    ):
        parser.error("--modes watched: twice each count of new records must be below its pool")
    KEEP_MIB[:] = [] if args.keep_mib is None else [str(int(args.keep_mib))]
    NEW_PREFIX[:] = ["zz-"] if args.new_after else []
    given = sys.argv[1:] if argv is None else argv
    result = run(args, shlex.join(["python", "benchmarks/run_anatomy.py", *given]))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
