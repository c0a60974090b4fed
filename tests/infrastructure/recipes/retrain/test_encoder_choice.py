"""Which encoder a later run trains with (recipes.retrain.encoder_choice, issue 90 item 2):
the served model's while the pool only grew by less than a quarter of the records it was
fitted on, with no new agent, else a fit; and never one fitted on a record this run
holds out or validates on."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pool_files import read_records

from genesis_fp16_infrastructure.data.fingerprint import compare
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import encoder_choice
from genesis_fp16_infrastructure.recipes.retrain.encoder_choice import served_encoder
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.split import choose_split
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.world_model.features import FeatureEncoder

SEED = 5
OPTIONS = TaskOptions.from_mapping({"cross_validation": False})


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A first pool of 4,000 records, the served state of a task trained on it, and the
    records that come after it."""
    pool = generate_pool(5400, seed=SEED)
    records = list(pool["trajectories"].values())
    folder = tmp_path_factory.mktemp("choice")
    first = read_records(folder / "data", {"a.json": records[:4000]}, pool)
    served = WorldModelTask(first, OPTIONS, SEED).extra_state()
    return {"pool": pool, "records": records, "served": served, "folder": folder}


def _choice(
    pools: dict[str, Any],
    name: str,
    records: list[dict[str, Any]],
    served: dict[str, Any] | None = None,
    options: TaskOptions = OPTIONS,
    seed: int = SEED,
) -> tuple[FeatureEncoder | None, str, ReadResult]:
    served = pools["served"] if served is None else served
    data = read_records(pools["folder"] / name, {"a.json": records}, pools["pool"])
    change = compare(served["data"], data.fingerprint)
    split = choose_split(data, options, seed)
    encoder, why = served_encoder(served, change, split, data.columns, options, seed)
    return encoder, why, data


def test_small_growth_reuses_the_served_encoder_which_fitted_training_records_only(
    pools: dict[str, Any],
) -> None:
    """300 records on 4,000: the served encoder itself; every record it was fitted on is
    a training record of the new split (none held out, none validated on)."""
    encoder, why, data = _choice(pools, "grown", pools["records"][:4300])
    assert encoder is not None, why
    assert encoder.state_dict() == pools["served"]["encoder"]
    first = read_trajectories(pools["folder"] / "data", keep_text=False)
    fitted_on = choose_split(first, OPTIONS, SEED).train
    assert encoder.fitted == len(fitted_on)
    before = set(first.columns.id_hash[first.columns.labelled[fitted_on]].tolist())
    split = choose_split(data, OPTIONS, SEED)
    ids = data.columns.id_hash[data.columns.labelled]
    assert before <= set(ids[split.train].tolist())
    assert not before & set(ids[np.concatenate((split.held_out, split.validation))].tolist())


def _relabelled(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    records = [dict(r) for r in records]
    at = next(i for i, r in enumerate(records) if r.get("success_score") is not None)
    records[at]["success_score"] = round(1.0 - records[at]["success_score"], 4)
    return records


def _new_agent(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return records[:4000] + [{**r, "agent_name": "a_new_agent"} for r in records[4000:4300]]


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("relabel", "removed, relabelled"),
        ("removal", "removed, relabelled"),
        ("a quarter more", "training records against"),
        ("a new agent", "a new agent"),
        ("an older checkpoint", "does not say its records"),
        ("another seed", "seed"),
        ("an eval_fraction", "eval_fraction"),
        ("cross-validated", "a cross-validated pool"),
        ("no served model", "no served model"),
    ],
)
def test_anything_else_fits(pools: dict[str, Any], case: str, reason: str) -> None:
    """A relabel, a removal, growth by a quarter of the fitted records, a new agent among
    the training records, a served encoder that does not say its records, another seed,
    an eval_fraction, a cross-validated split, or no served model: no encoder is reused,
    and the reason says why."""
    records: list[dict[str, Any]] = pools["records"]
    served = dict(pools["served"])
    options, seed, grown = OPTIONS, SEED, records[:4100]
    if case == "relabel":
        grown = _relabelled(records[:4000])
    elif case == "removal":
        grown = records[:3999]
    elif case == "a quarter more":
        grown = records[:5400]
    elif case == "a new agent":
        grown = _new_agent(records)
    elif case == "an older checkpoint":
        served["encoder"] = {k: v for k, v in served["encoder"].items() if k != "fitted"}
    elif case == "another seed":
        seed = SEED + 1
    elif case == "an eval_fraction":
        options = TaskOptions.from_mapping({"cross_validation": False, "eval_fraction": 0.3})
    elif case == "cross-validated":
        options = TaskOptions.from_mapping({"cross_validation": True})
    if case == "no served model":
        data = read_records(pools["folder"] / "none", {"a.json": grown}, pools["pool"])
        split = choose_split(data, options, seed)
        encoder, why = served_encoder(None, None, split, data.columns, options, seed)
    else:
        encoder, why, _ = _choice(pools, case.replace(" ", "_"), grown, served, options, seed)
    assert encoder is None and reason in why, why


def test_the_growth_is_counted_from_the_fit(pools: dict[str, Any]) -> None:
    """A served encoder reused before (its fitted count smaller than the served model's
    training part): the growth since its fit decides, not the growth since the served
    model's data."""
    served = dict(pools["served"])
    fitted = served["encoder"]["fitted"]
    served["encoder"] = served["encoder"] | {"fitted": fitted * 4 // 5}
    encoder, why, _ = _choice(pools, "chain", pools["records"][:4010], served)
    assert encoder is None and "training records against" in why
    assert encoder_choice.REUSE_GROWTH == 4


def test_a_task_says_which_encoder_it_took(pools: dict[str, Any]) -> None:
    """The task reports "served" with the served encoder, and "fitted" with one of its
    own (a fit of the grown pool is another encoder)."""
    served = pools["served"]
    data = read_records(
        pools["folder"] / "task", {"a.json": pools["records"][:4200]}, pools["pool"]
    )
    change = compare(served["data"], data.fingerprint)
    reused = WorldModelTask(data, OPTIONS, SEED, served=served, change=change)
    fitted = WorldModelTask(data, OPTIONS, SEED)
    assert (reused.encoder_use, fitted.encoder_use) == ("served", "fitted")
    assert reused.encoder.state_dict() == served["encoder"]
    assert fitted.encoder != reused.encoder and fitted.encoder.fitted == len(fitted.split.train)
    assert reused.extra_state()["encoder"] == served["encoder"]
