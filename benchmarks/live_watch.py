"""Does the live watch roll back what the gate could not see, and nothing else?

    python benchmarks/live_watch.py [--sequences 10] [--records 2000] [--out FILE] > results.md

Each sequence s grows a pool folder batch by batch (one file per batch, as records
arrive) and runs the library's loop after each batch (``SEDarwinPlugin.train``, resuming,
fp32, the default budget: what a scheduled run does; no daemon, so no pruning):

* **poison**: ``generate_pool(records, seed=s)``; its first 40% served; a batch of 10%
  marked ``"success"`` with no score (no golden pool: the gate cannot see it); then three
  clean batches of 10%. The served model after them, and the one served before the
  poison, are scored on a fresh pool (``generate_pool(records, seed=20_000 + s)``); the
  clean records the watch had scored when it rolled back are reported.
* **clean**: its first 25% served, then 10 batches (the fifth a new agent, ``qa``'s
  records, ``generate_pool(records // 10, seed=30_000 + s, agent="qa")``), each a run:
  false rollbacks over the 100 runs, and promotions.
* **cut short and worse**: four agents' pools (``records // 8`` each) served, then a
  fifth agent's records with every label flipped, trained with ``steps=3``: the gate's
  verdict (no golden pool).
* **real drift**: its first 30% served, then five batches of 10% in which a growing
  share of failures succeed (batch k turns each failure into a success with probability
  0.15 k; features unchanged): rollbacks, and whether the drift report flags the label
  shift.

* **mixed poison**: six agents' pools (``5 * records // 10`` each); ``records // 10`` of
  each served; ``records // 10`` more of the first agent's marked ``"success"`` with no
  score (the gate cannot see it); then up to ``MIXED_BATCHES`` clean batches of
  ``records // 20`` from each agent (the poisoned agent's share 1/6, 17%), a run after
  each, until the poisoned model is rolled back (the records it took, the poisoned
  agent's among them, and which test decided: ``all`` or the agent's segment) or a later
  candidate replaces it.
* **A/A**: each mixed sequence's pair (the poisoned model against the one before it)
  scores a fresh pool of the six agents (``records // 5`` each, interleaved: 2,400 at
  2,000), kept as a watch store; the watch's own self-test (judging.segments.self_test:
  its last 2,000 records, the null at the margin, every record a look) replays it
  ``--replays`` times, and on the same replays a fixed-sample z test with the same alpha
  split is looked at every ``records // 10`` records (10 runs' looks over 2,000).

First the cost: the ``live`` phase's share of the run's wall time when a run finds new
records, at each ``--cost-sizes`` pool (its first half served, a quarter more served by
hand over it, then the last quarter arrives). CPU, torch's default threads. Writes a
Markdown report to stdout (and to ``--out`` after each sequence).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genesis_fp16_agents.se_darwin.plugin import SEDarwinPlugin
from genesis_fp16_infrastructure.agent_folder.lifecycle import (
    candidate_entry,
    candidates_dir,
    newest_checkpoint,
    read_pointer,
    serve,
)
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequest, TrainRequestError
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.judging import segments
from genesis_fp16_infrastructure.judging.noninferiority import Bound, holm_worse
from genesis_fp16_infrastructure.recipes.retrain import gate, live_watch
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint

PLUGIN = SEDarwinPlugin()
_FLIP = {"success": "failure", "failure": "success"}
Pool = dict[str, Any]
Edit = Callable[[dict[str, Any]], None]


class Growth:
    """One sequence's folder: the pool grows by files, the loop runs after each."""

    def __init__(self, root: Path) -> None:
        self.root, self.data, self.ck = root, root / "data", root / "ck"
        self.data.mkdir(parents=True)
        self.batches = 0

    def add(self, pool: Pool, keys: list[str], edit: Edit | None = None) -> None:
        part = {**pool, "trajectories": {k: dict(pool["trajectories"][k]) for k in keys}}
        for record in part["trajectories"].values():
            if edit is not None:
                edit(record)
        (self.data / f"b{self.batches:03d}.json").write_text(json.dumps(part))
        self.batches += 1

    def run(self, **kw: Any) -> tuple[str, dict[str, Any]]:
        request = TrainRequest(
            agent="se_darwin",
            precision="fp32",
            precision_reason="benchmark",
            state_dir=self.root,
            checkpoint_dir=self.ck,
            data_path=self.data,
            resume=True,
            **kw,
        )
        try:
            result = PLUGIN.train(request)
        except TrainRequestError as exc:
            return "error", {"error": str(exc), "extra": {}}
        return result.outcome, result.to_json()

    def served(self) -> dict[str, Any]:
        pointer = read_pointer(self.ck)
        assert pointer is not None
        return pointer.served


def _ids(pool: Pool) -> list[str]:
    return list(pool["trajectories"])


def _poison(record: dict[str, Any]) -> None:
    record.update(status="success", success_score=None)


def _flip(record: dict[str, Any]) -> None:
    if record.get("success_score") is not None:
        record["success_score"] = round(1.0 - record["success_score"], 3)
    record["status"] = _FLIP.get(record.get("status"), record.get("status"))


def fresh_auc(ck: Path, checkpoint: str, fresh: Any) -> float:
    """AUC of the model in ``checkpoint`` (relative to ``ck``) on a fresh pool's read."""
    model = gate.ScoredModel(load_checkpoint(ck / checkpoint))
    records = gate.Records.of_columns(fresh.columns, np.arange(len(fresh.columns.labelled)))
    return gate.score(model.success_probability(records, False), records.labels)[0].auc


def poison_sequence(seed: int, records: int, work: Path) -> dict[str, Any]:
    pool, tenth = generate_pool(records, seed=seed), records // 10
    ids = _ids(pool)
    seq = Growth(work / f"poison{seed}")
    seq.add(pool, ids[: 4 * tenth])
    assert seq.run()[0] == "success"
    before = seq.served()
    seq.add(pool, ids[4 * tenth : 5 * tenth], _poison)
    outcome, _ = seq.run()
    poisoned_served = seq.served()["id"] != before["id"]
    rolled_at, lives = None, []
    for k in range(3):
        seq.add(pool, ids[(5 + k) * tenth : (6 + k) * tenth])
        _, data = seq.run()
        live = data.get("live")
        lives.append(live)
        if live and live.get("rolled_back") and rolled_at is None:
            rolled_at = live["records"]
    after = seq.served()
    fresh_path = work / f"fresh{seed}.json"
    fresh_path.write_text(json.dumps(generate_pool(records, seed=20_000 + seed)))
    fresh = read_trajectories(fresh_path)
    return {
        "poison_outcome": outcome,
        "poison_served": poisoned_served,
        "rolled_back_after": rolled_at,
        "before_auc": fresh_auc(seq.ck, before["checkpoint"], fresh),
        "after_auc": fresh_auc(seq.ck, after["checkpoint"], fresh),
        "after_is_before": after["id"] == before["id"],
    }


def clean_sequence(seed: int, records: int, work: Path) -> dict[str, Any]:
    pool, step = generate_pool(records, seed=seed), records * 3 // 40
    ids = _ids(pool)
    qa = generate_pool(step, seed=30_000 + seed, agent="qa")
    seq = Growth(work / f"clean{seed}")
    seq.add(pool, ids[: records // 4])
    assert seq.run()[0] == "success"
    runs = []
    start = records // 4
    for k in range(10):
        if k == 4:
            seq.add(qa, _ids(qa))
            served_before_qa = seq.served()
        else:
            seq.add(pool, ids[start : start + step])
            start += step
        outcome, data = seq.run()
        live, gate_ = data.get("live") or {}, data.get("gate") or {}
        runs.append(
            {
                "outcome": outcome,
                "gate": gate_.get("outcome"),
                "candidate": gate_.get("candidate_id"),
                "needed": gate_.get("records_needed"),
                "steps": data.get("steps"),
                "new_agent": k == 4,
                "rolled_back": bool(live.get("rolled_back")),
                "regression": bool(live.get("regression")),
                "difference": live.get("difference"),
                "upper": live.get("upper"),
                "newest_sd": _newest_spread(gate_),
            }
        )
    qa_candidate = runs[4]["candidate"]
    return {
        "runs": runs,
        "step": step,
        "differences": _paired_differences(seq, served_before_qa, qa_candidate),
    }


def _newest_spread(gate_: dict[str, Any]) -> float | None:
    """The s.d. of one record's log-loss difference on the gate's newest set."""
    for c in gate_.get("comparisons") or []:
        upper, lower = c.get("log_loss_worse_upper"), c.get("log_loss_worse_lower")
        if c.get("set") == "newest" and upper is not None and lower is not None:
            n = (c.get("candidate") or {}).get("records") or 0
            return (upper - lower) / (2 * gate.Z_ONE_SIDED) * n**0.5
    return None


def _paired_differences(seq: Growth, served: dict[str, Any], candidate: str | None) -> list[float]:
    """Per-record log-loss differences (candidate − the model served before it) of the
    candidate that brought the new agent, on every record of the final pool, each scored
    out of fold as the gate scores it: the power table resamples them."""
    if candidate is None:
        return []
    folder = candidates_dir(seq.ck) / candidate
    path = newest_checkpoint(folder)
    if path is None:
        return []
    read = read_trajectories(seq.data)
    records = gate.Records.of_columns(read.columns, np.arange(len(read.columns.labelled)))
    losses = []
    for checkpoint in (path, seq.ck / served["checkpoint"]):
        model = gate.ScoredModel(load_checkpoint(checkpoint))
        p = model.success_probability(records, True)
        losses.append(gate.score(p, records.labels)[1])
    return (losses[0] - losses[1]).tolist()


def short_sequence(seed: int, records: int, work: Path) -> dict[str, Any]:
    seq = Growth(work / f"short{seed}")
    for i, agent in enumerate(("se_darwin", "qa", "builder", "ops")):
        pool = generate_pool(records // 8, seed=40_000 + 10 * seed + i, agent=agent)
        seq.add(pool, _ids(pool))
    assert seq.run()[0] == "success"
    fifth = generate_pool(records // 8, seed=40_000 + 10 * seed + 5, agent="critic")
    seq.add(fifth, _ids(fifth), _flip)
    outcome, data = seq.run(steps=3)
    gate_ = data.get("gate") or {}
    failing = [
        c.get("segment") or c.get("set")
        for c in gate_.get("comparisons") or []
        if c.get("finding") == "worse"
    ]
    wholes = {  # what each whole set found: without segments, these decided
        c.get("set"): c.get("finding")
        for c in gate_.get("comparisons") or []
        if c.get("segment") is None
    }
    return {
        "outcome": outcome,
        "gate": gate_.get("outcome"),
        "failing": failing,
        "wholes": wholes,
        "reason": _why(data),
    }


POWER_SIZES = (200, 1000, 5000)
POWER_EFFECTS = (-0.02, -0.01, 0.0, 0.01)  # true mean difference, nats (below 0: better)


def power_table(differences: list[float], replays: int, seed: int = 0) -> list[dict[str, Any]]:
    """The gate's rule on one set of ``n`` newest records, replayed ``replays`` times per
    (n, effect): records drawn with replacement from the measured per-record differences,
    centred and shifted to the effect; the share promoted, inconclusive and rejected."""
    rng = np.random.default_rng(seed)
    d = np.asarray(differences, dtype=np.float64)
    centred = d - d.mean()
    rows = []
    for n in POWER_SIZES:
        for effect in POWER_EFFECTS:
            counts = {"no_worse": 0, "inconclusive": 0, "worse": 0}
            for _ in range(replays):
                drawn = rng.choice(centred, size=n) + effect
                bound = Bound.of("newest", drawn, gate.MARGIN_LOG_LOSS)
                counts[bound.finding(holm_worse([bound])[0])] += 1
            rows.append({"n": n, "effect": effect, **{k: v / replays for k, v in counts.items()}})
    return rows


def drift_sequence(seed: int, records: int, work: Path) -> dict[str, Any]:
    pool, tenth = generate_pool(records, seed=seed), records // 10
    ids = _ids(pool)
    rng = random.Random(50_000 + seed)
    seq = Growth(work / f"drift{seed}")
    seq.add(pool, ids[: 3 * tenth])
    assert seq.run()[0] == "success"
    rolled, flagged, shifts = 0, 0, []
    for k in range(1, 6):
        share = 0.15 * k

        def rise(record: dict[str, Any], share: float = share) -> None:
            if record.get("status") == "failure" and rng.random() < share:
                record.update(status="success", success_score=0.9)

        seq.add(pool, ids[(2 + k) * tenth : (3 + k) * tenth], rise)
        _, data = seq.run()
        rolled += bool((data.get("live") or {}).get("rolled_back"))
        drift = data.get("drift") or {}
        flagged += bool(drift.get("label_shift_flagged"))
        if drift.get("label_shift") is not None:
            shifts.append(drift["label_shift"])
    return {"rollbacks": rolled, "flagged_runs": flagged, "shifts": shifts}


MIXED = ("se_darwin", "qa", "builder", "ops", "critic", "planner")  # the first is poisoned


def mixed_sequence(seed: int, records: int, work: Path) -> dict[str, Any]:
    """A poisoned agent among five clean ones (module docstring): runs until the watch
    rolls the poisoned model back, or ``MIXED_BATCHES`` clean batches have arrived."""
    per = records // 10  # each agent's records in the first model; a batch is per / 2 each
    pools = [
        generate_pool(5 * per, seed=60_000 + 10 * seed + i, agent=a) for i, a in enumerate(MIXED)
    ]
    ids = [_ids(p) for p in pools]
    seq = Growth(work / f"mixed{seed}")
    for pool, keys in zip(pools, ids, strict=True):
        seq.add(pool, keys[:per])
    assert seq.run()[0] == "success"
    before = seq.served()
    seq.add(pools[0], ids[0][per : 2 * per], _poison)  # the gate cannot see it
    outcome, _ = seq.run()
    poisoned = seq.served()["id"]
    start, step = 2 * per, per // 2
    rolled: dict[str, Any] | None = None
    for k in range(MIXED_BATCHES):
        for i, (pool, keys) in enumerate(zip(pools, ids, strict=True)):
            first = (start if i == 0 else per) + k * step
            seq.add(pool, keys[first : first + step])
        _, data = seq.run()
        live = data.get("live") or {}
        if live.get("rolled_back") and live.get("served") == poisoned:
            rolled = _took(live, k + 1)
            break
        if seq.served()["id"] != poisoned:  # a later candidate replaced it: watched no more
            break
    fresh = _fresh_watch(seq, work / f"mixed_fresh{seed}.json", seed, per, before, poisoned)
    return {
        "fresh": fresh,
        "poison_outcome": outcome,
        "poison_served": poisoned != before["id"],
        "rolled": rolled,
        "replaced": rolled is None and seq.served()["id"] != poisoned,
        "batches": k + 1,
        "store": _largest_store(seq.ck),
    }


MIXED_BATCHES = 5


def _fresh_watch(
    seq: Growth, path: Path, seed: int, per: int, before: dict[str, Any], poisoned: str
) -> Path:
    """A watch store of the pair (the poisoned model against the one before it) on a
    fresh pool of the six agents, interleaved as records arrive: 2,000 records for
    the A/A self-test, whatever the sequence's own watch kept before it decided."""
    pools = [
        generate_pool(per * 2, seed=70_000 + 10 * seed + i, agent=a) for i, a in enumerate(MIXED)
    ]
    keys = [list(p["trajectories"].items()) for p in pools]
    mixed = dict(kv for group in zip(*keys, strict=True) for kv in group)
    path.write_text(json.dumps({**pools[0], "trajectories": mixed}))
    columns = read_trajectories(path).columns
    records = gate.Records.of_columns(columns, np.arange(len(columns.labelled)))
    candidate = candidates_dir(seq.ck) / poisoned
    checkpoint = newest_checkpoint(candidate)
    assert checkpoint is not None
    p = {}
    for side, file in (("served", checkpoint), ("previous", seq.ck / before["checkpoint"])):
        model = gate.ScoredModel(load_checkpoint(file))
        p[side] = model.success_probability(records, False).numpy().astype(np.float32)
    names = [str(a) for a in columns.agent.take(columns.labelled)]
    order = list(dict.fromkeys(names))
    kept = {
        "ids": columns.id_hash[columns.labelled],
        **p,
        "labels": records.labels.numpy().astype(np.float32),
        "segment": np.array([order.index(n) for n in names], dtype=np.int32),
        "segment_names": np.array(order),
    }
    store = path.with_suffix(".npz")
    live_watch._write_store(store, kept)
    return store


def _took(live: dict[str, Any], batches: int) -> dict[str, Any]:
    """The records a mixed rollback took: all, the poisoned agent's, which test decided."""
    segments = live.get("segments") or []
    harmed = next((s for s in segments if s.get("name") == MIXED[0]), {})
    by = [s["name"] for s in segments if s.get("regression")]
    if live.get("lower", 0) > live.get("margin", 0):
        by.insert(0, "all")
    return {
        "batches": batches,
        "records": live["records"],
        "harmed_records": harmed.get("records"),
        "share": (harmed.get("records") or 0) / max(live["records"], 1),
        "by": by,
    }


def _largest_store(ck: Path) -> Path | None:
    stores = sorted(ck.glob("candidates/*/live-*.npz"), key=lambda p: p.stat().st_size)
    return stores[-1] if stores else None


def aa_replays(store: Path, replays: int, look_every: int) -> dict[str, Any]:
    """The A/A self-test on a watch's store (``replays`` sign-flip replays at the margin,
    judging.segments.self_test), and on the same replays a fixed-sample z test (overall
    at alpha/2, each segment at alpha/32: the same family) looked at every ``look_every``
    records: each run's look."""
    kept = live_watch._read_store(store)
    p = {
        k: np.clip(kept[k].astype(np.float64), live_watch.CLIP, 1 - live_watch.CLIP)
        for k in ("served", "previous")
    }
    y = kept["labels"].astype(np.float64)
    loss = {k: -(y * np.log(v) + (1 - y) * np.log1p(-v)) for k, v in p.items()}
    d = loss["served"] - loss["previous"]
    names = live_watch._names(kept)
    a, m, span = live_watch.ALPHA, live_watch.MARGIN, live_watch.SPAN
    found = segments.self_test(d, names, span, m, a, replays=replays, seed=len(d))
    d, names = d[-segments.RECENT :], names[-segments.RECENT :]
    slot = segments.slots(names)[1]
    centred = d - (np.bincount(slot, d) / np.bincount(slot))[slot]
    signs = np.random.default_rng(len(kept["ids"])).choice((-1.0, 1.0), (replays, len(d)))
    replay = np.clip(m + signs * centred, -span, span)
    fixed = np.zeros(replays, dtype=np.bool_)
    for look in range(look_every, len(d) + look_every, look_every):
        fixed |= _z_rejects(replay[:, :look], m, a / 2)
        for k in range(int(slot.max()) + 1):
            fixed |= _z_rejects(replay[:, :look][:, slot[:look] == k], m, a / 32)
    return {**found, "fixed_false": int(fixed.sum())}


def obf_boundary(looks: int = 10, alpha: float = 0.05, paths: int = 400_000) -> float:
    """The final z boundary of a one-sided O'Brien-Fleming group-sequential test with
    ``looks`` equally spaced looks at level ``alpha`` (by simulation, seeded): what a
    watch with a known horizon could use instead of the confidence sequence."""
    rng = np.random.default_rng(0)
    k = np.arange(1, looks + 1)
    z = np.cumsum(rng.normal(size=(paths, looks)), axis=1) / np.sqrt(k)
    low, high = 1.0, 5.0
    for _ in range(30):
        c = (low + high) / 2
        low, high = (
            (c, high) if (z > c * np.sqrt(looks / k)).any(axis=1).mean() > alpha else (low, c)
        )
    return high


def _z_rejects(x: np.ndarray, margin: float, alpha: float) -> np.ndarray:
    """A fixed-sample one-sided z test per row: the mean above ``margin`` at ``alpha``."""
    n = x.shape[1]
    if n < 2:
        return np.zeros(len(x), dtype=np.bool_)
    z = statistics.NormalDist().inv_cdf(1 - alpha)
    return np.asarray(x.mean(axis=1) - z * x.std(axis=1, ddof=1) / np.sqrt(n) > margin)


def figures_seconds(records: int, agents: int = 6) -> float:
    """Seconds of the watch's decision alone (live_watch.figures_of: AUCs, log-losses, the
    overall and per-segment bounds, the A/A self-test) over a store of ``records``
    records from ``agents`` agents: what segments and the self-test add to a run."""
    rng = np.random.default_rng(0)
    kept = {
        "ids": np.arange(records, dtype=np.int64),
        "served": rng.uniform(0.05, 0.95, records).astype(np.float32),
        "previous": rng.uniform(0.05, 0.95, records).astype(np.float32),
        "labels": (rng.uniform(size=records) < 0.5).astype(np.float32),
        "segment": (np.arange(records) % agents).astype(np.int32),
        "segment_names": np.array([f"a{i}" for i in range(agents)]),
    }
    start = time.perf_counter()
    live_watch.figures_of(kept)
    return time.perf_counter() - start


def cost_at(records: int, work: Path) -> dict[str, Any]:
    """The live phase's share of a run that finds new records, at a pool of ``records``."""
    pool = generate_pool(records, seed=0)
    ids = _ids(pool)
    seq = Growth(work / f"cost{records}")
    seq.add(pool, ids[: records // 2])
    assert seq.run()[0] == "success"
    seq.add(pool, ids[records // 2 : records * 3 // 4])
    outcome, data = seq.run()
    if outcome != "success":  # rejected: serve it by hand, so that a pair is watched
        candidate = candidates_dir(seq.ck) / str(data["extra"]["candidate"])
        checkpoint = newest_checkpoint(candidate)
        assert checkpoint is not None
        serve(seq.ck, candidate_entry(seq.ck, candidate, checkpoint), "manual")
    seq.add(pool, ids[records * 3 // 4 :])
    outcome, data = seq.run()
    phases = data["phases"]
    return {
        "records": records,
        "outcome": outcome,
        "wall": data["wall_seconds"],
        "live": phases.get("live", 0.0),
        "gate": phases.get("gate", 0.0),
        "scored": (data.get("live") or {}).get("new_records"),
        "train": phases.get("train", 0.0),
    }


def _why(data: dict[str, Any]) -> str:
    return str(data.get("error") or (data.get("gate") or {}).get("reason"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sequences", type=int, default=10)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument(
        "--cost-sizes",
        type=lambda text: [int(x) for x in text.split(",") if x],
        default=[2000, 100_000],
    )
    parser.add_argument("--out", type=Path, help="rewrite the report here after each sequence")
    parser.add_argument(
        "--cases",
        type=lambda text: [x for x in text.split(",") if x],
        default=["cost", "poison", "clean", "short", "drift", "mixed"],
        help="what to run (mixed also runs the A/A self-test on its stores; cost: whole runs "
        "at each --cost-sizes; the watch's decision alone is timed at each size always)",
    )
    parser.add_argument("--replays", type=int, default=200, help="A/A replays per store")
    parser.add_argument("--first-seed", type=int, default=0, help="the first sequence's seed")
    parser.add_argument("--power-replays", type=int, default=2000)
    parser.add_argument("--json-out", type=Path, help="the raw figures, rewritten likewise")
    parser.add_argument(
        "--report-from", type=Path, nargs="+", help="merge --json-out files and report them"
    )
    args = parser.parse_args(argv)
    if args.report_from:  # sequences run apart (e.g. two processes), reported as one
        return _merged_report(args)
    logging.basicConfig(level=logging.ERROR)
    start = time.perf_counter()
    found: dict[str, list[dict[str, Any]]] = {
        "poison": [],
        "clean": [],
        "short": [],
        "drift": [],
        "mixed": [],
        "aa": [],
    }
    costs: list[dict[str, Any]] = []
    kinds = (
        ("poison", poison_sequence),
        ("clean", clean_sequence),
        ("short", short_sequence),
        ("drift", drift_sequence),
        ("mixed", mixed_sequence),
    )
    kinds = tuple((name, run) for name, run in kinds if name in args.cases)
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.cost_sizes:  # the decision alone, on a store of that many records
            costs.append({"decision": size, "seconds": figures_seconds(size)})
        for i, size in enumerate(args.cost_sizes if "cost" in args.cases else []):
            costs.append(cost_at(size, Path(tmp) / f"c{i}"))
            print(f"cost at {size} done, {time.perf_counter() - start:.0f} s", file=sys.stderr)
        for seed in range(args.first_seed, args.first_seed + args.sequences):
            for name, sequence in kinds:
                found[name].append(sequence(seed, args.records, Path(tmp)))
            store = found["mixed"][-1]["fresh"] if "mixed" in args.cases else None
            if store is not None:  # each mixed pair's watch of a fresh pool, replayed A/A
                found["aa"].append(aa_replays(store, args.replays, args.records // 10))
            print(f"sequence {seed} done, {time.perf_counter() - start:.0f} s", file=sys.stderr)
            _add_power(found, args)  # after each sequence: a run stopped early keeps it
            if args.json_out is not None:
                args.json_out.write_text(json.dumps(found))
            if args.out is not None:  # a run stopped early still leaves what it measured
                args.out.write_text(_report(found, costs, args, time.perf_counter() - start))
    report = _report(found, costs, args, time.perf_counter() - start)
    if args.out is not None:
        args.out.write_text(report)
    print(report)
    return 0


def _mixed_lines(mixed: list[dict[str, Any]], aa: list[dict[str, Any]]) -> list[str]:
    """The mixed-poison and A/A rows of the table."""
    lines = []
    if mixed:
        rolled = [m["rolled"] for m in mixed if m["rolled"] is not None]
        took = [r["records"] for r in rolled]
        harmed = [r["harmed_records"] or 0 for r in rolled]
        by = sum("all" not in r["by"] for r in rolled)
        share = max((r["share"] for r in rolled), default=0.0)
        when = (
            f"median {statistics.median(took):.0f} records (max {max(took)}), of them the "
            f"poisoned agent's median {statistics.median(harmed):.0f} (share <= {share:.0%}); "
            f"decided by its segment alone in {by}"
            if rolled
            else "-"
        )
        lines.append(
            f"| mixed poison (one agent of six, its later labels <= 20% of the records): "
            f"rolled back | >= 9 of 10 | {len(rolled)} of {len(mixed)} (poison served by the "
            f"gate in {sum(m['poison_served'] for m in mixed)}; {when}) |"
        )
    if aa:
        n, false = sum(a["replays"] for a in aa), sum(a["false_rollbacks"] for a in aa)
        fixed = sum(a["fixed_false"] for a in aa)
        low, high = segments.wilson(false, n)
        lines.append(
            f"| A/A self-test: false rollbacks over {n:,} replays of {len(aa)} watches' records "
            f"(null at the margin, every record a look) | <= alpha (0.05) | {false / n:.4f} "
            f"[{low:.4f}, {high:.4f}]; a fixed-sample z test peeked at every run: "
            f"{fixed / n:.4f} |"
        )
    return lines


def _report(
    found: dict[str, list[dict[str, Any]]], costs: list[dict[str, Any]], args: Any, wall: float
) -> str:
    n = max(len(v) for k, v in found.items() if k != "power")
    lines = [
        f"# Live watch: {n} of {args.sequences} sequences, pools of {args.records} records",
        "",
        f"CPU ({torch.get_num_threads()} threads), torch {torch.__version__}; "
        f"`python benchmarks/live_watch.py --sequences {args.sequences} --records "
        f"{args.records}`; {wall:.0f} s in all.",
        "",
        "| scenario | target | result |",
        "| --- | --- | --- |",
    ]
    poison = found["poison"]
    if poison:
        ok = sum(p["after_auc"] >= p["before_auc"] - 0.01 for p in poison)
        served = sum(p["poison_served"] for p in poison)
        rolled = [p["rolled_back_after"] for p in poison if p["rolled_back_after"] is not None]
        when = f"median {statistics.median(rolled):.0f}, max {max(rolled)}" if rolled else "-"
        lines += [
            f"| poison, then 3 clean batches: served after them within 0.01 fresh AUC of the "
            f"model before the poison | >= 9 of 10 | {ok} of {n} (poison served by the gate in "
            f"{served}; rolled back in {len(rolled)}; clean records scored at the rollback: "
            f"{when}) |"
        ]
    lines += _clean_lines(found["clean"]) + _short_lines(found["short"])
    drift = found["drift"]
    if drift:
        rolled = sum(d["rollbacks"] for d in drift)
        flagged = sum(d["flagged_runs"] > 0 for d in drift)
        shifts = [s for d in drift for s in d["shifts"]]
        lines.append(
            f"| real drift (success rate rising): rollbacks; label shift reported | 0; "
            f"reported | {rolled} rollbacks in {5 * len(drift)} runs; label shift flagged in "
            f"{flagged} of {len(drift)} sequences (median shift "
            f"{statistics.median(shifts) if shifts else float('nan'):+.3f}) |"
        )
    lines += _mixed_lines(found["mixed"], found["aa"])
    if "mixed" in args.cases:
        c = obf_boundary()
        lines.append(
            f"| a known horizon: O'Brien-Fleming, 10 looks, one-sided 0.05, final z boundary "
            f"| - | {c:.2f} sigma/sqrt(N), against the watch's ~{1.4 * (2 * 2.9957) ** 0.5:.2f} "
            f"sigma/sqrt(n) (1.4 sigma sqrt(2 log 20 / n)): about "
            f"{(1.4 * (2 * 2.9957) ** 0.5 / c) ** 2:.1f}x fewer records at the horizon |"
        )
    for c in costs:
        if "decision" in c:
            lines.append(
                f"| the watch's decision alone (figures_of: bounds, 6 segments, 200 A/A "
                f"replays) on a store of {c['decision']:,} records | - | {c['seconds']:.3f} s |"
            )
            continue
        both = c["live"] + c["gate"]
        lines.append(
            f"| cost at {c['records']:,} records ({c['scored'] or 0:,} new scored): the watch "
            f"(live) and the gate together | <= 5% of the run | {both:.3f} s of "
            f"{c['wall']:.2f} s: {both / c['wall']:.1%} (live {c['live']:.3f} s, gate "
            f"{c['gate']:.3f} s, train {c['train']:.2f} s; the run {c['outcome']}) |"
        )
    lines += ["", "Per sequence:", ""]
    for i, p in enumerate(poison):
        lines.append(
            f"- poison s{i}: gate {p['poison_outcome']}, served {p['poison_served']}, rolled "
            f"back after {p['rolled_back_after']} clean records; fresh AUC before "
            f"{p['before_auc']:.4f}, after {p['after_auc']:.4f} (same model: "
            f"{p['after_is_before']})"
        )
    lines += _clean_marks(found["clean"])
    for i, m in enumerate(found["mixed"]):
        r = m["rolled"]
        how = "no"
        if r is not None:
            by = ",".join(r["by"])
            how = f"after {r['records']} records ({r['harmed_records']} the agent's), by {by}"
        lines.append(
            f"- mixed s{i}: gate {m['poison_outcome']}, served {m['poison_served']}; rolled "
            f"back {how}; replaced by a later candidate first: {m['replaced']}; "
            f"{m['batches']} clean batches"
        )
    for i, a in enumerate(found["aa"]):
        lines.append(
            f"- A/A s{i}: {a['false_rollbacks']} of {a['replays']} replays of {a['records']} "
            f"records rolled back (fixed test peeked: {a['fixed_false']})"
        )
    lines += _short_marks(found["short"])
    lines += _power_lines(found.get("power") or [], args)
    return "\n".join(lines) + "\n"


def _merged_report(args: Any) -> int:
    """The report of several ``--json-out`` files' sequences, in the order given."""
    names = ("poison", "clean", "short", "drift", "mixed", "aa")
    found: dict[str, list[dict[str, Any]]] = {k: [] for k in names}
    for path in args.report_from:
        for name, items in json.loads(path.read_text()).items():
            if name != "power":
                found.setdefault(name, []).extend(items)
    _add_power(found, args)
    print(_report(found, [], args, math.nan))
    return 0


def _add_power(found: dict[str, list[dict[str, Any]]], args: Any) -> None:
    """The power table from the clean sequences' measured differences so far."""
    differences = [d for seq in found["clean"] for d in seq["differences"]]
    if differences:
        found["power"] = power_table(differences, args.power_replays)


def _qa_fate(seq: dict[str, Any]) -> tuple[str, int | None]:
    """What became of the first candidate trained on the new agent's records (the run
    that found them may instead judge a kept, older candidate again, training none):
    promoted at once, promoted when judged again (with the records that arrived after
    it), or not; and those records (0: at once; None: never)."""
    runs, step = seq["runs"], seq["step"]
    trained = [(k, r) for k, r in enumerate(runs) if k >= 4 and r["steps"]]
    if not trained:
        return "never trained", None
    at, first = trained[0]
    if first["gate"] == "promoted":
        return "promoted at once", 0
    for k, r in enumerate(runs[at + 1 :], start=1):
        if r["gate"] == "promoted" and r["candidate"] == first["candidate"]:
            return f"{first['gate']}, promoted judged again after {k * step} records", k * step
    return f"{first['gate']}, not promoted itself", None


def _learned(seq: dict[str, Any]) -> int | None:
    """The records that arrived after the new agent's until a model trained on them was
    served (0: in the run that found them); None: never in these runs."""
    runs, step = seq["runs"], seq["step"]
    knowing = {r["candidate"] for k, r in enumerate(runs) if k >= 4 and r["steps"]}
    for k, r in enumerate(runs[4:]):
        if r["gate"] == "promoted" and r["candidate"] in knowing:
            return k * step
    return None


def _clean_lines(clean_seqs: list[dict[str, Any]]) -> list[str]:
    clean = [r for seq in clean_seqs for r in seq["runs"]]
    if not clean:
        return []
    false = sum(r["rolled_back"] for r in clean)
    fates = [_qa_fate(seq) for seq in clean_seqs]
    took = [t for _, t in fates if t is not None]
    later = [t for t in took if t > 0]
    learned = [t for t in (_learned(seq) for seq in clean_seqs) if t is not None]
    when = f"median {statistics.median(learned):.0f}, max {max(learned)}" if learned else "-"
    verdicts = Counter(r["gate"] for r in clean)
    return [
        f"| clean growth: false rollbacks | <= 1 in 100 runs | {false} in {len(clean)} runs "
        f"(gate verdicts: {', '.join(f'{k} {v}' for k, v in sorted(verdicts.items(), key=str))}) |",
        f"| clean growth: candidates bringing a new agent promoted (at once, or inconclusive "
        f"and promoted when judged again) | >= 8 of 10 | {len(took)} of {len(fates)} "
        f"({len(took) - len(later)} at once, {len(later)} judged again, after "
        f"{', '.join(str(t) for t in later) or '-'} new records) |",
        f"| clean growth: a model trained on the new agent's records served | - | "
        f"{len(learned)} of {len(clean_seqs)} (records after the new agent's until then: "
        f"{when}) |",
    ]


def _short_lines(short: list[dict[str, Any]]) -> list[str]:
    if not short:
        return []
    rejected = sum(s["gate"] == "rejected" for s in short)
    by_segment = sum(any(f not in ("held_out", "newest") for f in s["failing"]) for s in short)
    verdicts = Counter(s["gate"] for s in short)
    wholes = Counter(
        f"{name} {finding}" for s in short for name, finding in s.get("wholes", {}).items()
    )
    return [
        f"| cut short (3 steps) and worse (a fifth agent's flipped labels), no golden "
        f"pool: rejected | >= 9 of 10 | {rejected} of {len(short)} (a known agent's segment "
        f"shown worse in {by_segment}; verdicts: "
        f"{', '.join(f'{k} {v}' for k, v in sorted(verdicts.items(), key=str))}; the whole "
        f"sets alone: {', '.join(f'{k}: {v}' for k, v in sorted(wholes.items()))}) |"
    ]


def _clean_marks(clean_seqs: list[dict[str, Any]]) -> list[str]:
    mark = {"promoted": "p", "rejected": "r", "inconclusive": "i", "held": "h"}
    lines = []
    for i, seq in enumerate(clean_seqs):
        marks = " ".join(
            ("R" if r["rolled_back"] else "")
            + mark.get(str(r["gate"]), str(r["outcome"])[:1])
            + ("0" if r["steps"] == 0 and r["gate"] else "")
            + ("*" if r["new_agent"] else "")
            for r in seq["runs"]
        )
        lines.append(
            f"- clean s{i}: {marks}; new agent's candidate: {_qa_fate(seq)[0]} (p promoted, "
            f"r rejected, i inconclusive, 0 a kept candidate judged again, no step; R rolled "
            f"back, * qa arrives)"
        )
    return lines


def _short_marks(short: list[dict[str, Any]]) -> list[str]:
    return [f"- short s{i}: {s['gate']}: {s['reason']}" for i, s in enumerate(short)]


def _power_lines(rows: list[dict[str, Any]], args: Any) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        f"The gate's power on its newest set ({args.power_replays} replays per cell; each "
        "record's log-loss difference drawn from those measured between the new agent's "
        "candidates and the models served before them, centred, shifted by the effect; "
        f"margin {gate.MARGIN_LOG_LOSS} nats, 95% one-sided): promoted / inconclusive / "
        "rejected",
        "",
        "| newest records | " + " | ".join(f"effect {r['effect']:+.2f}" for r in rows[:4]) + " |",
        "| --- |" + " --- |" * 4,
    ]
    for i in range(0, len(rows), 4):
        cells = [
            f"{r['no_worse']:.0%} / {r['inconclusive']:.0%} / {r['worse']:.0%}"
            for r in rows[i : i + 4]
        ]
        lines.append(f"| {rows[i]['n']:,} | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
