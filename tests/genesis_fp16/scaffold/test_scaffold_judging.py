"""The scaffold's agent, judged for real (fp32, its linear model, the default budget of
100 steps): it trains on no held-out record, the gate judges it on records neither model
trained on, and issue 68's attack (shuffled copies of the pool appended) is not served
while clean growth is."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from script_module import load_script

from genesis_fp16.commands.model import list_models
from genesis_fp16.plugin_api import PrecisionRequest, TrainRequest, TrainRequestError
from genesis_fp16.scaffold import agent_source
from genesis_fp16.status.report import read_served
from genesis_fp16_infrastructure.agent_folder.candidates import list_candidates, read_verdict
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.api import Outcome, run_plugin
from genesis_fp16_infrastructure.contract.split import HELD_OUT, id_hashes
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.judging.trained_ids import trained_ids
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint

POOL = 1000  # a fifth held out: about 200 records the served model knew, never trained on


def _agent(tmp_path: Path, name: str = "judged_toy") -> ModuleType:
    """The scaffold's agent module, as `new-agent` writes it, imported from tmp_path."""
    source = tmp_path / f"{name}.py"
    source.write_text(agent_source(name))
    return load_script(source)


def _lines(count: int, seed: int) -> list[str]:
    """``count`` records of y = 2 sum(x) + noise, as the scaffold's sample data."""
    rng = random.Random(seed)
    xs = [[round(rng.uniform(-1, 1), 6) for _ in range(4)] for _ in range(count)]
    return [json.dumps({"x": x, "y": round(2 * sum(x) + rng.gauss(0, 0.01), 6)}) for x in xs]


def _shuffled(lines: list[str], seed: int) -> list[str]:
    """The same inputs with one another's labels: new lines, labels that say nothing."""
    records = [json.loads(line) for line in lines]
    labels = [r["y"] for r in records]
    random.Random(seed).shuffle(labels)
    return [json.dumps({"x": r["x"], "y": y}) for r, y in zip(records, labels, strict=True)]


def _request(tmp_path: Path, lines: list[str]) -> TrainRequest:
    data = tmp_path / "records.jsonl"
    data.write_text("\n".join(lines) + "\n")
    return TrainRequest(
        agent="judged_toy",
        precision=PrecisionRequest("fp32"),
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "checkpoints",
        device="cpu",
        seed=1,
        resume=True,
        data_path=data,
    )


def _served(tmp_path: Path) -> str:
    pointer = read_pointer(tmp_path / "checkpoints")
    assert pointer is not None
    return str(pointer.served.id)


def _first_served(tmp_path: Path, plugin: Any, lines: list[str]) -> str:
    first = run_plugin(plugin, _request(tmp_path, lines))
    assert first.gate is not None and first.gate.outcome == "promoted", first.gate
    return _served(tmp_path)


def _every_row(request: TrainRequest, ids: list[str]) -> list[int]:
    """A plugin edited to train on every record: no row held out."""
    return list(range(len(ids)))


def _verdict(tmp_path: Path, candidate: str | None) -> dict[str, Any]:
    verdict = read_verdict(tmp_path / "checkpoints" / "candidates" / str(candidate)).to_json()
    assert verdict
    return verdict


def _judged(verdict: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in verdict["judged"] if c["set"] == name and c["segment"] is None)


def test_the_scaffold_trains_on_no_held_out_record_and_its_checkpoint_says_so(
    tmp_path: Path,
) -> None:
    """The served checkpoint names the records its model trained on: none held out, and
    every one a record of the pool that is not held out."""
    lines = _lines(POOL, seed=1)
    agent = _agent(tmp_path)
    _first_served(tmp_path, agent.plugin, lines)
    pointer = read_pointer(tmp_path / "checkpoints")
    assert pointer is not None
    trained = trained_ids(tmp_path / "checkpoints" / pointer.served.checkpoint)
    assert trained is not None and 0 < len(trained) < POOL
    ids = agent.read_records(tmp_path / "records.jsonl", None)[0]
    pool = id_hashes(ids)
    assert not HELD_OUT.of_hashes(trained).any()
    assert set(trained.tolist()) <= set(pool[~HELD_OUT.of_hashes(pool)].tolist())


@pytest.mark.slow
def test_shuffled_copies_of_the_pool_do_not_promote_a_candidate(tmp_path: Path) -> None:
    """Issue 68's attack: the first model served on a clean pool, then five shuffled
    copies of it appended (label noise, 5 of every 6 records). The candidate that learned
    them is not served: the gate, on held-out records only, finds it worse on those the
    served model knew (set ``known``), which the new records' noise cannot excuse."""
    lines = _lines(POOL, seed=1)
    plugin = _agent(tmp_path).plugin
    first = _first_served(tmp_path, plugin, lines)
    noisy = lines + [line for k in range(5) for line in _shuffled(lines, seed=10 + k)]
    result = run_plugin(plugin, _request(tmp_path, noisy))
    not_served = (Outcome.REJECTED, Outcome.INCONCLUSIVE)
    assert result.gate is not None
    assert result.gate.outcome in not_served, result.gate.reason
    assert _served(tmp_path) == first
    verdict = _verdict(tmp_path, result.gate.candidate_id)
    held_out, known = _judged(verdict, "held_out"), _judged(verdict, "known")
    # Judged on about a fifth of the 6,000 records, never on what the candidate learned
    assert 0.15 * 6 * POOL < held_out["records"] < 0.25 * 6 * POOL
    assert 0.15 * POOL < known["records"] < 0.25 * POOL
    assert known["candidate_loss"] > known["served_loss"] + known["margin"]


@pytest.mark.slow
def test_clean_growth_is_promoted_on_held_out_records(tmp_path: Path) -> None:
    """The first model served, then as many fresh clean records appended: the candidate
    continues it on twice the records and is promoted, shown no worse on the held-out
    records, both the whole set and those the served model knew."""
    plugin = _agent(tmp_path).plugin
    lines = _lines(POOL, seed=1)
    first = _first_served(tmp_path, plugin, lines)
    result = run_plugin(plugin, _request(tmp_path, lines + _lines(POOL, seed=2)))
    assert result.gate is not None
    assert result.gate.outcome == "promoted", result.gate.reason
    assert _served(tmp_path) == result.gate.candidate_id != first
    names = {c.name for c in result.gate.comparisons}
    assert names == {"held_out", "known"}


def test_a_candidate_that_trained_on_held_out_records_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scaffold edited to train on every record (training_rows keeps all) is refused
    at its first run: one line naming the held-out records, the verdict undecided, no
    model served. Once a model that names its records is served, a candidate whose task
    names none is refused the same way."""
    agent = _agent(tmp_path)
    lines = _lines(200, seed=3)
    with monkeypatch.context() as edited:
        edited.setattr(TrainRequest, "training_rows", _every_row)
        with pytest.raises(
            TrainRequestError, match=r"trained on \d+ held-out record\(s\) of 200:"
        ) as e:
            run_plugin(agent.plugin, _request(tmp_path, lines))
    assert "\n" not in str(e.value) and read_pointer(tmp_path / "checkpoints") is None
    (candidate,) = list_candidates(tmp_path / "checkpoints")
    assert read_verdict(candidate).outcome == "undecided"
    assert f"candidate {candidate.name} trained on" in str(e.value)

    first = _first_served(tmp_path, agent.plugin, lines)
    monkeypatch.setattr(agent.Task, "extra_state", lambda self: {})
    with pytest.raises(TrainRequestError, match="names no records it trained on, where the"):
        run_plugin(agent.plugin, _request(tmp_path, lines + _lines(100, seed=4)))
    assert _served(tmp_path) == first


@pytest.mark.slow
def test_a_model_served_before_the_split_is_judged_only_on_records_it_never_knew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A served model that names no trained records (a plugin written before the split,
    trained on every record) is compared only on held-out records it never knew: the
    new ones."""
    agent = _agent(tmp_path)
    old = _lines(300, seed=4)
    with monkeypatch.context() as legacy:
        legacy.setattr(TrainRequest, "training_rows", _every_row)
        legacy.setattr(agent.Task, "extra_state", lambda self: {})
        _first_served(tmp_path, agent.plugin, old)
    new = _lines(POOL, seed=5)
    result = run_plugin(agent.plugin, _request(tmp_path, old + new))
    assert result.gate is not None
    assert result.gate.outcome == "promoted", result.gate.reason
    verdict = _verdict(tmp_path, result.gate.candidate_id)
    new_ids = agent.read_records(tmp_path / "records.jsonl", None)[0][len(old) :]
    assert _judged(verdict, "held_out")["records"] == int(HELD_OUT.of_ids(new_ids).sum())
    assert "known" not in {c["set"] for c in verdict["judged"]}
    assert verdict["evidence"] == "held_out"


def test_a_plugin_whose_checkpoints_name_no_records_is_judged_on_training_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plugin that names no records it trained on (written before the split) is still
    judged, on every current record (set ``current``), and says so: in its verdict
    (reason and evidence), in `model list` (its row and GATE column) and, served, on the
    status page."""
    agent = _agent(tmp_path)
    monkeypatch.setattr(TrainRequest, "training_rows", _every_row)
    monkeypatch.setattr(agent.Task, "extra_state", lambda self: {})
    lines = _lines(300, seed=6)
    _first_served(tmp_path, agent.plugin, lines)
    result = run_plugin(agent.plugin, _request(tmp_path, lines + _lines(300, seed=7)))
    assert result.gate is not None
    assert "(on training data: the candidate names no records" in result.gate.reason
    verdict = _verdict(tmp_path, result.gate.candidate_id)
    assert _judged(verdict, "current")["records"] == 600
    assert verdict["evidence"] == result.gate.evidence == "training_data"
    folder = tmp_path / "checkpoints"
    assert list_models(folder, "judged_toy", as_json=True) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert rows[result.gate.candidate_id]["evidence"] == "training_data"
    assert list_models(folder, "judged_toy", as_json=False) == 0
    table = capsys.readouterr().out
    assert "(on training data)" in table.split(result.gate.candidate_id, 1)[1].splitlines()[0]
    status = AgentFolder(tmp_path / "state", "judged_toy")  # the page reads the state layout
    status.checkpoint_dir.parent.mkdir(parents=True)
    status.checkpoint_dir.symlink_to(folder)
    served, _ = read_served(status, 86400.0)
    # Served, the first model or the candidate: each was judged on its training data.
    assert served is not None and served.evidence is not None
    assert served.evidence.startswith("judged on its training data")


def _appending(plugin: Any) -> Any:
    """The plugin's score_records, edited to append bytes to the checkpoint it scored."""
    honest = plugin.score_records

    def score_records(checkpoint: Path, request: TrainRequest) -> Any:
        losses = honest(checkpoint, request)
        with checkpoint.open("ab") as file:
            file.write(b"tampered")
        return losses

    return score_records


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_plugin_that_alters_the_candidate_it_scores_is_refused_and_nothing_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 69: a score_records that appends to its checkpoint fails the first run in
    one line naming the plugin and the checkpoint; nothing is served, the candidate's own
    checkpoint still loads (undecided); the next run with the honest plugin serves."""
    agent = _agent(tmp_path)
    lines = _lines(200, seed=8)
    with monkeypatch.context() as edited:
        edited.setattr(agent.plugin, "score_records", _appending(agent.plugin))
        with pytest.raises(
            TrainRequestError, match="plugin judged_toy: score_records changed"
        ) as caught:
            run_plugin(agent.plugin, _request(tmp_path, lines))
    assert "\n" not in str(caught.value) and "ckpt-" in str(caught.value)
    assert read_pointer(tmp_path / "checkpoints") is None
    (candidate,) = list_candidates(tmp_path / "checkpoints")
    verdict = read_verdict(candidate).to_json()
    assert verdict["outcome"] == "undecided" and "changed the checkpoint" in verdict["reason"]
    checkpoint = sorted(candidate.glob("ckpt-*.pt"))[-1]
    load_checkpoint(checkpoint)  # as training wrote it: its digest still matches
    assert not list((tmp_path / "checkpoints").glob(".scoring-*"))  # the altered copy: gone
    assert _first_served(tmp_path, agent.plugin, lines) != candidate.name


def test_a_plugin_that_alters_the_served_checkpoint_leaves_it_served_and_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 69: with a model served, a score_records that appends to what it scores
    fails the run at the served model's scoring; the pointer and the served files are
    byte for byte as they were, and the next honest run of the agent works."""
    agent = _agent(tmp_path)
    lines = _lines(200, seed=9)
    first = _first_served(tmp_path, agent.plugin, lines)
    folder = tmp_path / "checkpoints"
    pointer = read_pointer(folder)
    assert pointer is not None
    served = folder / pointer.served.checkpoint
    files = [folder / "served.json", served, served.with_name(served.name + ".sha256")]
    before = [_sha256(path) for path in files]
    grown = lines + _lines(100, seed=10)
    with monkeypatch.context() as edited:
        edited.setattr(agent.plugin, "score_records", _appending(agent.plugin))
        with pytest.raises(TrainRequestError, match=r"score_records changed the checkpoint"):
            run_plugin(agent.plugin, _request(tmp_path, grown))
    assert [_sha256(path) for path in files] == before and _served(tmp_path) == first
    result = run_plugin(agent.plugin, _request(tmp_path, grown))
    assert result.gate is not None
    assert result.failure is None, result.gate.reason


def test_the_scaffold_parses_an_unchanged_file_once_and_keeps_every_reads_rejects(
    tmp_path: Path,
) -> None:
    """A judged run reads the data file four times: the second read of the same text is
    the first's parse (the same tensors), each read given a quarantine file still copies
    the rejected line there, and a changed file is read afresh."""
    agent = _agent(tmp_path)
    data, quarantine = tmp_path / "records.jsonl", tmp_path / "quarantine.jsonl"
    data.write_text("\n".join([*_lines(5, seed=1), "not a record"]) + "\n")
    first = agent.read_records(data, quarantine)
    second = agent.read_records(data, quarantine)
    assert second[1] is first[1] and second[0] == first[0] and second[3] == 1
    assert [json.loads(line)["record"] for line in quarantine.read_text().splitlines()] == [
        "not a record",
        "not a record",
    ]
    data.write_text("\n".join(_lines(6, seed=2)) + "\n")
    changed = agent.read_records(data, None)
    assert len(changed[0]) == 6 and changed[3] == 0 and changed[0] != first[0]


def test_a_scaffold_checkpoint_names_its_records_by_their_hashes(tmp_path: Path) -> None:
    """The served checkpoint's trained_ids is one int64 tensor of the ids' hashes
    (request.trained_ids), which the judged run reads as the same records as the ids."""
    agent = _agent(tmp_path)
    _first_served(tmp_path, agent.plugin, _lines(POOL, seed=1))
    pointer = read_pointer(tmp_path / "checkpoints")
    assert pointer is not None
    checkpoint = tmp_path / "checkpoints" / pointer.served.checkpoint
    stored = load_checkpoint(checkpoint)["extra"]["trained_ids"]
    assert stored.dtype == torch.int64 and stored.dim() == 1
    ids = agent.read_records(tmp_path / "records.jsonl", None)[0]
    kept = [i for i, held in zip(ids, HELD_OUT.of_ids(ids), strict=True) if not held]
    trained = trained_ids(checkpoint)
    assert trained is not None and trained.tolist() == sorted(set(id_hashes(kept).tolist()))
