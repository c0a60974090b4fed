# The agent a new plugin starts from: `genesis-fp16 new-agent NAME` writes this file as
# NAME/__init__.py, with __AGENT__ replaced by NAME. It is real code (ruff and mypy read it,
# tests/genesis_fp16/scaffold/test_new_agent.py trains it) and only imports genesis_fp16.plugin_api.
"""__AGENT__: a genesis-fp16 agent plugin (a toy regression, trained through the precision core).

Data: JSON Lines, one record a line, ``{"x": [four numbers], "y": number}``. A record that
is not one is skipped, counted and copied to the run's quarantine file; a file with no
usable record, or that cannot be read, is refused with one line naming it.

Judged models: the agent scores each record (its squared error, ``score_records``), so
genesis-fp16 trains each run into a candidate, serves it only when it is no worse than
the served model on records neither trained on, and rolls the served model back when
records that come later show it worse than the one before it. A record's id is a hash of
its line. The agent never trains on the records genesis-fp16 holds out for that judgement
(``request.training_rows``: a fifth of them, by their ids), and each checkpoint says
which records it trained on (``trained_ids``, in the task's ``extra_state``): a candidate
that trained on a held-out record is refused.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.plugin_api import (
    API_VERSION,
    JUDGING_VERSION,
    ProbeSetup,
    RecordLosses,
    TrainRequest,
    TrainRequestError,
    TrainResult,
    fit,
    model_weights,
    to_device,
)

FEATURES = 4
BATCH = 64


def _record(line: str) -> tuple[list[float], float] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    x, y = value.get("x"), value.get("y")
    if not isinstance(x, list) or len(x) != FEATURES:
        return None
    numbers: list[Any] = [*x, y]
    if not all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in numbers
    ):
        return None
    return [float(v) for v in numbers[:FEATURES]], float(numbers[FEATURES])


def read_records(
    path: Path, quarantine: Path | None
) -> tuple[list[str], torch.Tensor, torch.Tensor, int]:
    """(ids, x, y, skipped) from a JSON Lines file, each record's id a hash of its line (a
    repeated line's repeats are numbered: ids stay unique and stable); TrainRequestError
    when nothing is usable."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainRequestError(f"{path}: cannot read it as text ({exc})") from None
    ids, x, y, bad = _parse(text)
    if bad and quarantine is not None:  # never lose data: the rejects are kept, with where
        quarantine.parent.mkdir(parents=True, exist_ok=True)
        with quarantine.open("a") as file:
            for line in bad:
                file.write(json.dumps({"source": str(path), "record": line}) + "\n")
    if len(ids) < 2:
        raise TrainRequestError(
            f"{path}: {len(ids)} usable records of {len(ids) + len(bad)}; each line must "
            f'be {{"x": [{FEATURES} numbers], "y": number}}'
        )
    return ids, x, y, len(bad)


# A judged run reads the data file four times (its train, and the served model, the
# candidate and the one before scored): the last text's parse is kept, and an unchanged
# text is not parsed again (0.7 s a read at 100,000 records). Nothing changes the
# tensors it returns in place.
@functools.lru_cache(maxsize=1)
def _parse(text: str) -> tuple[list[str], torch.Tensor, torch.Tensor, list[str]]:
    """(ids, x, y, rejected lines) of a data file's text."""
    good: list[tuple[list[float], float]] = []
    ids: list[str] = []
    seen: dict[str, int] = {}
    bad: list[str] = []
    for line in text.splitlines():
        if line.strip():
            record = _record(line)
            if record is None:
                bad.append(line)
            else:
                good.append(record)
                digest = hashlib.sha256(line.strip().encode()).hexdigest()[:16]
                seen[digest] = seen.get(digest, 0) + 1
                ids.append(digest if seen[digest] == 1 else f"{digest}#{seen[digest]}")
    x = torch.tensor([r[0] for r in good])
    y = torch.tensor([[r[1]] for r in good])
    return ids, x, y, bad


class Task:
    """A TrainingTask: the model, its optimizer, the batches, the loss and the evaluation.
    ``trained``: the records it learns from, as ``request.trained_ids`` names them (the
    checkpoint then says which records it learned from)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, trained: Any = None) -> None:
        validation = max(1, len(x) // 10)  # fit() reports its eval loss on these
        self.x, self.y = x[validation:], y[validation:]
        self.eval_x, self.eval_y = x[:validation], y[:validation]
        self.trained = trained

    def build_model(self) -> torch.nn.Module:
        return torch.nn.Linear(FEATURES, 1)

    def build_optimizers(self, model: torch.nn.Module) -> list[torch.optim.Optimizer]:
        return [torch.optim.AdamW(model.parameters(), 1e-2)]

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Any, int]]:
        order = torch.randperm(len(self.x), generator=torch.Generator().manual_seed(seed + epoch))
        for i in range(0, len(order), BATCH):
            index = order[i : i + BATCH]
            yield (self.x[index], self.y[index]), len(index)

    def loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        return torch.nn.functional.mse_loss(model(batch[0]).float(), batch[1])

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        # The model is on the run's device; this data is on the CPU: bring it there.
        device = next(model.parameters()).device
        batch = to_device((self.eval_x, self.eval_y), device)
        with torch.no_grad():
            return {"loss": float(self.loss(model, batch))}

    def extra_state(self) -> dict[str, Any]:
        # Which records this model learned from: genesis-fp16 checks none was held out.
        return {} if self.trained is None else {"trained_ids": self.trained}


class Agent:
    api_version, name, description = API_VERSION, "__AGENT__", "toy regression (scaffold)"
    judging_version = JUDGING_VERSION
    # The gate and the live watch clip each record's squared error to [0, 1]: a bound
    # they need; a record off by more than 1 counts as off by 1.
    loss_span = 1.0

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        """Write ``count`` records of y = 2 * sum(x) + noise to ``out``/data.jsonl."""
        rng = random.Random(seed)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "data.jsonl"
        with path.open("w") as file:
            for _ in range(count):
                x = [round(rng.uniform(-1, 1), 6) for _ in range(FEATURES)]
                y = round(2 * sum(x) + rng.gauss(0, 0.01), 6)
                file.write(json.dumps({"x": x, "y": y}) + "\n")
        return path

    def train(self, request: TrainRequest) -> TrainResult:
        if request.data_path is None:
            raise TrainRequestError(f"{self.name}: no data (genesis-fp16 train passes --data)")
        ids, x, y, skipped = read_records(Path(request.data_path), request.quarantine_path)
        # Never the records genesis-fp16 holds out: the gate judges the model on them.
        rows = request.training_rows(ids)
        if len(rows) < 2:
            raise TrainRequestError(
                f"{request.data_path}: {len(rows)} of {len(ids)} records left to train on "
                "once a fifth is held out for judging; add records"
            )
        task = Task(x[rows], y[rows], request.trained_ids([ids[i] for i in rows]))
        # No budget in the request (no --steps, no STEPS_PER_RUN): DEFAULT_STEPS.
        result = fit(task, request.fit_options())
        return TrainResult.from_fit(request, result, quarantined=skipped)

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        """The checkpoint's squared error on each record of the request's data that it
        asks for (the judged run asks for a part: the records it judges on)."""
        if request.data_path is None:
            raise TrainRequestError(f"{self.name}: no data to score")
        ids, x, y, _ = read_records(Path(request.data_path), None)
        rows = request.scoring_rows(ids)
        model = Task(x, y).build_model()
        model.load_state_dict(model_weights(checkpoint))
        with torch.no_grad():
            errors = ((model(x[rows]) - y[rows]) ** 2).squeeze(1)
        return RecordLosses.of([ids[i] for i in rows], errors.tolist())

    def replay_task(self, context: dict[str, Any]) -> Task:
        """A fault bundle's step, for `genesis-fp16 replay`: this model, optimizer and loss.
        None of them depends on the data (the bundle holds the step's batches), so no data
        is read: a bundle replays after its data is gone."""
        return Task(torch.zeros(0, FEATURES), torch.zeros(0, 1))

    def probe_setup(self, data_path: Path | None, seed: int) -> ProbeSetup:
        if data_path is None:
            raise TrainRequestError(f"{self.name}: the probe needs data")
        task = Task(*read_records(Path(data_path), None)[1:3])
        batches = [batch for batch, _ in task.train_batches(0, seed)][:4]

        def build_model() -> torch.nn.Module:
            torch.manual_seed(seed)
            return task.build_model()

        return ProbeSetup(
            build_model=build_model,
            loss=task.loss,
            batches=batches,
        )


plugin = Agent()
