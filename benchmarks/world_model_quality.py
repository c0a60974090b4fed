"""How well the SE-Darwin world model ranks attempts at its defaults, against the best the
features allow, on generated pools of 500, 5,000 and 20,000 records, scored on fresh ones.

    python benchmarks/world_model_quality.py [--sizes 500,5000,20000] [--seeds 30,3,1]
        [--precisions fp32,bf16,fp16]

For each pool size N and each of its seeds s (0..P-1):

* **Training pool**: ``generate_pool(N, seed=s)``, as ``genesis-fp16 sample-data`` writes it.
* **Model**: ``SEDarwinPlugin.train`` at its defaults (sized splits, early stopping, the
  sized model) in each precision on the CPU (one thread), trained on that pool only;
  the fresh records are scored through the prediction API (``WorldModelPredictor.load`` on
  the run's checkpoint folder, then ``predict(attempts, pool)``: the saved encoder, the
  served best weights, in fp32 as the API always predicts).
* **Reference**, "what these features allow": an L2-regularised logistic regression
  (LBFGS, standardised on its own fitting records) on the same encoded features (the
  run's encoder), fitted on the N-record training pool only; its strength is the best of
  five by out-of-fold AUC *within* that pool (5 folds by a hash of the id), then it is
  refitted on the whole pool. It never sees an evaluation record. A second reference is
  fitted the same way on only the records the model trained and validated on (the pool
  less its held-out part): the gap to it separates "the model learns worse" from "the
  defaults keep 10-30% of a small pool aside to report an AUC".
* **Evaluation records**: fresh pools from the same generator, never used for fitting:
  ``ceil(20,000 / N)`` pools of N records each, seeds ``1,000,000 + 1,000 s + k``, read
  together as one folder (about 19,500 labelled records for every N). They are of the
  same kind as the training pool because the generator's hidden effects (operator, tools,
  change size, files, lineage, agent: the ``*_EFFECT`` constants of
  ``genesis_fp16_infrastructure.data.synthetic``) are module constants, the same for every seed; a
  seed draws only the attempts, their noise and the lineage's hidden promise. The *size*
  is not neutral (a pool's number of generations, and so its lineages' depth, grows with
  it), so the fresh pools have the training pool's size. Each record is encoded the way
  the prediction API encodes a candidate: its lineage (parents, grandparents, earlier
  siblings) from the pool it belongs to, which the fresh pools hold; records of different
  pools never link (parents are drawn from a pool's own history).

The gap is paired: model AUC minus reference AUC on the same fresh records, one per
training pool; the table gives its mean over the pools, its standard error and the
worst pool's. "eval AUC (train)" is the AUC ``train --json`` reports: on pools under
3,334 records, which the defaults cross-validate, the members' out-of-fold AUC over
the whole pool; on larger ones the held-out part's (1,000 records at 5,000). A
cross-validated run trains on the whole pool, so its two references are one.
Writes a Markdown table to stdout.

    python benchmarks/world_model_quality.py --ablation --sizes 500,5000,20000 --seeds 16,2,1

instead measures what each feature group of encoder v2 adds: for each pool, the
reference's fresh AUC with all features and with each group's columns removed, and the
world model's (fp32, trained by ``fit`` as the plugin trains it, on the same splits, with
the group's columns set to 0 so that they carry nothing) with the same groups gone
(``--no-model``: the reference only). The agent base rate is a constant on these
one-agent pools; the next mode measures it.

    python benchmarks/world_model_quality.py --merged-agents 500,2000

measures what the per-agent base rate adds where pools of several agents are merged
(se_darwin, qa and builder pools of N records each, seeds 0, 1, 2, read as one folder):
the out-of-fold logistic AUC on the encoded features with and without it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16_agents.se_darwin.plugin import SEDarwinPlugin
from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.schema import OPERATORS, AttemptInput
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.split import split_examples
from genesis_fp16_infrastructure.recipes.retrain.task import Batch, Part, WorldModelTask
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
from genesis_fp16_infrastructure.training.run.early_stop import served_weights
from genesis_fp16_infrastructure.training.run.fit import FitOptions, fit
from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES, FeatureEncoder
from genesis_fp16_infrastructure.world_model.metrics import auc
from genesis_fp16_infrastructure.world_model.model import build_world_model
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor

L2_GRID = (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)
FOLDS = 5
FRESH_RECORDS, FRESH_SEED = 20_000, 1_000_000


@dataclass(frozen=True)
class Records:
    """Attempts with the pool their lineage comes from, and whether each succeeded."""

    attempts: list[AttemptInput]
    pool: Pool
    success: torch.Tensor
    ids: list[str]

    @classmethod
    def of(cls, data: ReadResult, keep: Callable[[str], bool] = lambda _: True) -> Records:
        examples = [e for e in data.examples if keep(e.trajectory_id)]
        success = torch.tensor([float(e.label.success) for e in examples], dtype=torch.double)
        return cls(
            [e.attempt for e in examples], data.pool, success, [e.trajectory_id for e in examples]
        )

    def features(self, encoder: FeatureEncoder) -> torch.Tensor:
        return encoder.encode(self.attempts, self.pool).double()


def fresh_records(size: int, seed: int) -> Records:
    """Evaluation records for the training pool (size, seed); see the module docstring."""
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(math.ceil(FRESH_RECORDS / size)):
            write_pool(Path(tmp) / str(k), size, FRESH_SEED + 1000 * seed + k)
        data = read_trajectories(Path(tmp))
    if data.duplicates:  # ids are 40 random bits: two pools sharing one would mix lineages
        raise RuntimeError(f"fresh pools for ({size}, {seed}) share {data.duplicates} id(s)")
    return Records.of(data)


def _logistic(x: torch.Tensor, y: torch.Tensor, l2: float) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.zeros(x.shape[1], dtype=torch.double, requires_grad=True)
    b = torch.zeros((), dtype=torch.double, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, y)
        loss = loss + l2 * w.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


def _fold(trajectory_id: str) -> int:
    digest = hashlib.blake2b(f"fold:{trajectory_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % FOLDS


def _fitted_logits(
    x: torch.Tensor, y: torch.Tensor, l2: float, x_new: torch.Tensor
) -> torch.Tensor:
    """Logits of ``x_new`` from a regression fitted on (x, y), standardised on x."""
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    w, b = _logistic((x - mean) / std, y, l2)
    return ((x_new - mean) / std) @ w + b


def _out_of_fold_logits(
    x: torch.Tensor, y: torch.Tensor, fold: torch.Tensor, l2: float
) -> torch.Tensor:
    """Each row's logit from a regression fitted on the other folds."""
    logits = torch.empty(len(y), dtype=torch.double)
    for k in range(FOLDS):
        fit_on = fold != k
        logits[~fit_on] = _fitted_logits(x[fit_on], y[fit_on], l2, x[~fit_on])
    return logits


def _out_of_fold_auc(x: torch.Tensor, y: torch.Tensor, fold: torch.Tensor, l2: float) -> float:
    return auc(_out_of_fold_logits(x, y, fold, l2), y)


def reference_auc(
    x: torch.Tensor,
    y: torch.Tensor,
    ids: Sequence[str],
    fresh_x: torch.Tensor,
    fresh_y: torch.Tensor,
) -> float:
    """Fresh AUC of the logistic reference fitted on (x, y) only, its strength picked
    by out-of-fold AUC within those records."""
    fold = torch.tensor([_fold(i) for i in ids])
    l2 = max(L2_GRID, key=lambda s: _out_of_fold_auc(x, y, fold, s))
    return auc(_fitted_logits(x, y, l2, fresh_x), fresh_y)


def merged_agents_gain(per_agent: int) -> tuple[float, float]:
    """(OOF AUC with the agent base rate, without it) on three merged agents' pools."""
    with tempfile.TemporaryDirectory() as tmp:
        for seed, agent in enumerate(("se_darwin", "qa", "builder")):
            write_pool(Path(tmp), per_agent, seed=seed, agent=agent)
        data = read_trajectories(Path(tmp) / "trajectory_pools")
        task = WorldModelTask(data, TaskOptions(), 0)
    records = Records.of(data)
    x, y = records.features(task.encoder), records.success
    fold = torch.tensor([_fold(i) for i in records.ids])
    # The agent's base rate is the encoder's last column.
    with_rate = max(_out_of_fold_auc(x, y, fold, l2) for l2 in L2_GRID)
    without = max(_out_of_fold_auc(x[:, :-1], y, fold, l2) for l2 in L2_GRID)
    return with_rate, without


def _train(
    plugin: SEDarwinPlugin,
    data: Path,
    checkpoints: Path,
    precision: str,
    seed: int,
    options: Mapping[str, Any],
) -> TrainResult:
    return plugin.train(
        TrainRequest(
            agent="se_darwin",
            precision=precision,
            precision_reason="quality benchmark",
            state_dir=checkpoints.parent,
            checkpoint_dir=checkpoints,
            data_path=data,
            seed=seed,
            resume=False,
            options=options,
        )
    )


@dataclass(frozen=True)
class Run:
    """One training pool in one precision, scored on its fresh records."""

    fresh_auc: float
    reference: float  # the reference fitted on the whole training pool
    reference_seen: float  # the reference fitted on the records the model trained on
    held_out_auc: float  # what `train --json` reports
    best_step: int
    steps: int
    seconds: float


def measure(
    size: int, seed: int, precisions: Sequence[str], options: Mapping[str, Any]
) -> dict[str, Run]:
    """One training pool: a default run per precision, and the references, all scored on
    the same fresh records."""
    fresh = fresh_records(size, seed)
    out: dict[str, Run] = {}
    with tempfile.TemporaryDirectory() as tmp:
        plugin = SEDarwinPlugin()
        path = plugin.generate_sample_data(Path(tmp), size, seed)
        data = read_trajectories(path)
        references: tuple[float, float] | None = None
        for precision in precisions:
            started = time.monotonic()
            checkpoints = Path(tmp) / f"ckpt-{precision}"
            result = _train(plugin, path, checkpoints, precision, seed, options)
            seconds = time.monotonic() - started
            predictor = WorldModelPredictor.load(checkpoints)
            predicted = predictor.predict(fresh.attempts, fresh.pool)
            p = torch.tensor([q.success_probability for q in predicted], dtype=torch.double)
            if references is None:
                references = _references(predictor.encoder, data, fresh, seed, options)
            early = result.early_stop
            out[precision] = Run(
                auc(p, fresh.success),
                *references,
                result.eval["auc"],
                early.best_step,
                result.steps,
                seconds,
            )
    return out


def _references(
    encoder: FeatureEncoder,
    data: ReadResult,
    fresh: Records,
    seed: int,
    options: Mapping[str, Any],
) -> tuple[float, float]:
    """(the reference on the whole pool, on the model's training and validation parts).

    A cross-validated run trains on the whole pool: the two are then one."""
    task_options = TaskOptions.from_mapping(options)
    fresh_x = fresh.features(encoder)
    parts = [Records.of(data)]
    if not task_options.cross_validated(len(data.examples)):
        rows = split_examples(data, seed, task_options.eval_fraction).held_out
        held = {data.examples[r].trajectory_id for r in rows}
        parts.append(Records.of(data, lambda i: i not in held))
    out = []
    for records in parts:
        x = records.features(encoder)
        out.append(reference_auc(x, records.success, records.ids, fresh_x, fresh.success))
    return out[0], out[-1]


def _se(values: Sequence[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan


def _fmt_se(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.4f}"


def _row(size: int, precision: str, runs: Sequence[Run]) -> str:
    mean = statistics.fmean
    gaps = [r.fresh_auc - r.reference for r in runs]
    seen = [r.fresh_auc - r.reference_seen for r in runs]
    return (
        f"| {size} | {len(runs)} | {precision} | {mean(r.fresh_auc for r in runs):.4f} | "
        f"{mean(r.reference for r in runs):.4f} | {mean(gaps):+.4f} | {_fmt_se(_se(gaps))} | "
        f"{min(gaps):+.4f} | {mean(r.reference_seen for r in runs):.4f} | {mean(seen):+.4f} | "
        f"{_fmt_se(_se(seen))} | {mean(r.held_out_auc for r in runs):.3f} | "
        f"{mean(r.best_step for r in runs):.0f} / {mean(r.steps for r in runs):.0f} | "
        f"{mean(r.seconds for r in runs):.1f} |"
    )


MAIN_HEADER = (
    "| records | pools | precision | model AUC, fresh | reference AUC, fresh | gap | gap s.e. | "
    "worst pool's gap | reference on the model's part | gap to it | its s.e. | "
    "eval AUC (train) | best step / steps | seconds |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def feature_groups(encoder: FeatureEncoder) -> dict[str, list[int]]:
    """Encoder v2's feature groups, as column indices of ``encoder.encode``'s rows."""
    named = {
        "files touched (kinds, distinct files)": [
            "touches_tests",
            "touches_config",
            "touches_docs",
            "touches_code",
            "log_distinct_files",
        ],
        "kind of change (added share, hunks)": ["added_share", "log_hunks"],
        "lineage depth, grandparents": [
            "log_depth",
            "grandparent_score_mean",
            "grandparent_score_known",
        ],
        "parents' operators": [f"parents_{op}" for op in OPERATORS],
        "earlier siblings": ["log_siblings", "sibling_score_mean", "sibling_success_share"],
    }
    groups = {name: [NUMERIC_FEATURES.index(f) for f in names] for name, names in named.items()}
    groups["agent base rate"] = [encoder.n_features - 1]  # the last column
    v2 = {i for columns in groups.values() for i in columns}
    groups["version 1 features"] = [i for i in range(encoder.n_features) if i not in v2]
    return groups


def _masked_model_auc(
    data: ReadResult, seed: int, drop: Sequence[int], fresh: Records, tmp: Path
) -> float:
    """Fresh AUC of a default fp32 run whose ``drop`` columns are 0 in every split."""
    task = WorldModelTask(data, TaskOptions(), seed)
    for name in ("train_data", "validation_data", "eval_data"):
        part = getattr(task, name)
        batch = part.batch() if isinstance(part, Part) else part
        x = batch.x.clone()
        x[:, list(drop)] = 0.0
        masked = Batch(x, *list(batch)[1:])  # _replace trips on Batch.__len__
        setattr(task, name, Part(masked) if isinstance(part, Part) else masked)
    options = FitOptions(
        precision="fp32",
        seed=seed,
        epochs=task.options.max_epochs,
        resume=False,
        checkpoint_dir=tmp,
        early_stop=task.early_stopping(),
    )
    fit(task, options)
    found = CheckpointManager(tmp).load_latest()
    assert found is not None
    model = build_world_model(task.config)
    model.load_state_dict(served_weights(found[0]))
    x = fresh.features(task.encoder).float()
    x[:, list(drop)] = 0.0
    with torch.no_grad():
        logits = model.eval()(x).success_logit
    return auc(logits.double(), fresh.success)


def ablation(size: int, seed: int, with_model: bool) -> dict[str, tuple[float, float]]:
    """Per group (and "all features"): (reference fresh AUC, model fresh AUC or NaN)."""
    fresh = fresh_records(size, seed)
    with tempfile.TemporaryDirectory() as tmp:
        data = read_trajectories(write_pool(Path(tmp), size, seed))
        encoder = WorldModelTask(data, TaskOptions(), seed).encoder
        records = Records.of(data)
        x, fresh_x = records.features(encoder), fresh.features(encoder)
        out: dict[str, tuple[float, float]] = {}
        for name, drop in {"all features": [], **feature_groups(encoder)}.items():
            keep = [i for i in range(encoder.n_features) if i not in set(drop)]
            reference = reference_auc(
                x[:, keep], records.success, records.ids, fresh_x[:, keep], fresh.success
            )
            model = math.nan
            if with_model:
                model = _masked_model_auc(data, seed, drop, fresh, Path(tmp) / f"ckpt-{len(out)}")
            out[name] = (reference, model)
    return out


def _ablation_table(sizes: Sequence[int], counts: Sequence[int], with_model: bool) -> None:
    results = {
        size: [ablation(size, seed, with_model) for seed in range(count)]
        for size, count in zip(sizes, counts, strict=True)
    }
    print(
        "| features | "
        + " | ".join(f"{s}: reference / change | {s}: model / change" for s in sizes)
        + " |"
    )
    print("| --- |" + " --- | --- |" * len(sizes))
    for name in results[sizes[0]][0]:
        cells = []
        for size in sizes:
            for which in (0, 1):
                values = [r[name][which] for r in results[size]]
                change = [r[name][which] - r["all features"][which] for r in results[size]]
                if math.isnan(values[0]):
                    cells.append("")
                elif name == "all features":
                    cells.append(f"{statistics.fmean(values):.4f}")
                else:
                    se = _fmt_se(_se(change))
                    cells.append(
                        f"{statistics.fmean(values):.4f} / {statistics.fmean(change):+.4f}"
                        + (f" ± {se}" if se else "")
                    )
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,5000,20000")
    parser.add_argument("--seeds", default="30,3,1", help="pools (seeds 0..P-1) per size")
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    parser.add_argument("--options", default="{}", help="se_darwin options as JSON (not defaults)")
    parser.add_argument("--ablation", action="store_true", help="what each feature group adds")
    parser.add_argument("--no-model", action="store_true", help="--ablation: reference only")
    parser.add_argument("--merged-agents", help="records per agent, e.g. 500,2000")
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    torch.set_num_threads(1)
    if args.merged_agents:
        print("| records (3 agents) | logistic OOF, with agent base rate | without |")
        print("| --- | --- | --- |")
        for per_agent in (int(n) for n in args.merged_agents.split(",")):
            with_rate, without = merged_agents_gain(per_agent)
            print(f"| {3 * per_agent} | {with_rate:.3f} | {without:.3f} |", flush=True)
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    counts = [int(s) for s in args.seeds.split(",")]
    if len(counts) != len(sizes):
        parser.error(f"--seeds {args.seeds!r} needs one count per size ({args.sizes!r})")
    if args.ablation:
        _ablation_table(sizes, counts, with_model=not args.no_model)
        return 0
    precisions = args.precisions.split(",")
    print(MAIN_HEADER)
    for size, count in zip(sizes, counts, strict=True):
        runs = [measure(size, seed, precisions, options) for seed in range(count)]
        for precision in precisions:
            print(_row(size, precision, [r[precision] for r in runs]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
