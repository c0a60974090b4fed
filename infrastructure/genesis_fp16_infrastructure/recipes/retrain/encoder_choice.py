"""Which feature encoder a run trains with: the served model's, or one fitted on its own
training part (issue 90, item 2: a record is encoded once).

A run trains afresh, and until issue 90 it fitted its encoder afresh too: every numeric
column's mean and spread over the training part (~26 ms of CPU at 100,000 records), which
moves every record's scaled row, so that every row was encoded again (~31 ms) and no
encoded row could be kept. An unforced later run now encodes with **the served model's
encoder** while that encoder still fits the pool (:func:`served_encoder`):

* the served model's checkpoint holds an encoder of this version that says how many
  records it was fitted on (``fitted``: a checkpoint from before it says nothing, and
  its next run fits);
* the pool **only grew** since the served model's data (``data.fingerprint.compare``:
  no record removed, relabelled or edited);
* the training part grew by **less than a quarter** (:data:`REUSE_GROWTH`) of the
  records the encoder was fitted on, counted from its fit, not from the served model's
  data: a chain of small growths refits once their sum reaches a quarter, so that the
  scale and the vocabulary never lag the pool by more than that;
* **no new agent** among the training records: an agent the encoder never saw is
  encoded as unknown (its base rate the overall one), which a fit would not do;
* the records it was fitted on are training records of this run (no leakage; the
  checks are :func:`_fitted_within`'s): the judged held-out part is chosen by each
  record's judged id alone (``split.judged_held_out``), so none of the served model's
  training records is held out now; validation records are drawn by a hash of (seed,
  id) under a share that shrinks as the pool grows, so with the same seed, split hash
  and no ``eval_fraction`` option, a record trained on then is trained on now unless
  this run's validation share is larger (checked: then it fits);
* a single process (under torchrun only rank 0 reads the served copy: every rank fits);
* a held-out split: a cross-validated pool (under 3,334 labelled records) fits, as
  before. Its fit costs a few milliseconds, a quarter of it is a few hundred records, and
  its models move most with their encoder: what reuse saves is at large pools (at 100,000
  records the fit is ~26 ms of CPU and the scaling of every row ~31 ms).

Otherwise it fits as before: a first model, a forced run or a resume (the checkpoint's
own encoder, ``task.py``), a removal or relabel, a large growth, or no usable encoder.
The run says which (``train --json``'s ``extra.encoder``: ``served``, ``fitted`` or
``checkpoint``, and ``extra.encoder_reason``).

    encoder, why = served_encoder(served, change, split, columns, options, seed)
    # encoder None: fit one (why says what ruled the served one out)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from genesis_fp16_infrastructure.data.fingerprint import DataChange
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.split import Split
from genesis_fp16_infrastructure.training.distributed import rank_and_world
from genesis_fp16_infrastructure.world_model.features import FeatureEncoder

# The served encoder is reused while the training part grew by less than 1/REUSE_GROWTH
# of the records it was fitted on: a quarter.
REUSE_GROWTH = 4
SERVED, FITTED, CHECKPOINT = "served", "fitted", "checkpoint"  # extra.encoder's values


def served_encoder(
    served: Mapping[str, Any] | None,
    change: DataChange | None,
    split: Split,
    columns: PoolColumns,
    options: TaskOptions,
    seed: int,
) -> tuple[FeatureEncoder | None, str]:
    """The served model's encoder when this run may encode with it (module docstring),
    else None; and why, in a few words (``extra.encoder_reason``)."""
    if served is None:
        return None, "no served model"
    if rank_and_world()[1] > 1:
        return None, "several processes"
    if split.fold_count:
        return None, "a cross-validated pool"
    if change is None or change.previous is None:
        return None, "the served model's data unknown"
    if change.removed or change.relabelled:
        return None, "records removed, relabelled or edited"
    try:
        encoder = FeatureEncoder.from_state(served["encoder"])
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"the served encoder unusable ({exc})"
    fitted = encoder.fitted
    if fitted is None:
        return None, "the served encoder does not say its records"
    why = _fitted_within(served.get("split"), split, options, seed)
    if why:
        return None, why
    grown = len(split.train) - fitted
    if grown < 0 or REUSE_GROWTH * grown >= fitted:
        return None, f"{len(split.train)} training records against {fitted} fitted"
    if _new_agent(columns, split, {agent for agent, _ in encoder.agent_rates}):
        return None, "a new agent"
    return encoder, f"{grown} training records since its fit on {fitted}"


def _new_agent(columns: PoolColumns, split: Split, known: set[Any]) -> bool:
    """Whether an agent outside ``known`` has a training record. The pool's agents are
    looked at first, a few values: the training records are counted only when one of
    them is new (a pool of known agents, the common later run, counts no record).

    >>> from genesis_fp16_infrastructure.data.pool_columns import Coded
    >>> from types import SimpleNamespace
    >>> pool = SimpleNamespace(agent=Coded.of(["a", "b", "a"]), labelled=np.arange(3))
    >>> train = SimpleNamespace(train=np.array([0, 2]))
    >>> _new_agent(pool, train, {"a"}), _new_agent(pool, train, set())
    (False, True)
    """
    values = columns.agent.values
    if all(value in known for value in values):
        return False
    agents = columns.agent.at(columns.labelled[split.train])
    present = np.flatnonzero(np.bincount(agents.codes, minlength=len(values)))
    return any(values[k] not in known for k in present.tolist())


def _fitted_within(saved: Any, split: Split, options: TaskOptions, seed: int) -> str | None:
    """Why the served model's training records may not all be this run's (module
    docstring), or None: they are."""
    if not isinstance(saved, Mapping):
        return "the served split unknown"
    if int(saved.get("folds", -1)) != 0 or saved.get("seed") != seed:
        return "another kind of split or seed"
    if saved.get("hash") != split.hash or options.eval_fraction is not None:
        return "another split hash, or an eval_fraction"
    if split.validation_fraction > float(saved.get("validation_fraction", 0.0)):
        return "a larger validation share"
    return None
