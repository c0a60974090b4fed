"""The task file of ``rlhf_ppo``: the task's sizes and the held-out eval prompts.

``plugin.generate_sample_data`` writes it; ``train`` and ``probe_setup`` read it here,
refusing an unusable file in one line and quarantining an unusable prompt.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.plugin_api import TrainRequestError
from genesis_fp16_agents.rlhf_ppo.task import TaskConfig

logger = logging.getLogger(__name__)


def read_task(
    data_path: Path | None, quarantine: Path | None
) -> tuple[TaskConfig, torch.Tensor | None, int, str]:
    """The task config, the eval prompts, how many prompts were quarantined and the
    task's digest (:func:`parse_task`; "" without a task file).

    A file that cannot be used (a folder, not UTF-8 JSON, not ``{"task": {...},
    "eval_prompts": [...]}``, task fields this agent does not know) is a
    :class:`TrainRequestError`: one line naming the file. An eval prompt that is not
    ``prompt_len`` tokens below ``vocab`` is skipped and appended to ``quarantine``.
    """
    if data_path is None:
        return TaskConfig(), None, 0, ""
    path = Path(data_path)
    if path.is_dir():
        raise TrainRequestError(f"rlhf_ppo: data {path}: is a folder; give the task file")
    try:
        task, prompts, bad, digest = parse_task(str(path), path.read_text(encoding="utf-8"))
    except TrainRequestError:
        raise
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON
        why = str(exc).splitlines()[0]
        raise TrainRequestError(f"rlhf_ppo: data {path}: not a JSON task file ({why})") from None
    if bad and quarantine is not None:  # never lose data: the rejects are kept, with where
        quarantine.parent.mkdir(parents=True, exist_ok=True)
        with quarantine.open("a") as file:
            for prompt in bad:
                file.write(json.dumps({"source": str(path), "record": prompt}) + "\n")
    if prompts is None:
        raise TrainRequestError(
            f"rlhf_ppo: data {path}: no usable eval prompt of {len(bad)} (each must be "
            f"{task.prompt_len} integers in [0, {task.vocab}))"
        )
    if bad:
        logger.warning("rlhf_ppo: %s: %d eval prompts quarantined", path, len(bad))
    return task, prompts, len(bad), digest


# A judged run reads the task file four times (its train, and three policies scored):
# the last text's parse is kept, and an unchanged text is not parsed again (0.25 s a
# read at 100,000 eval prompts). Nothing changes the tensor it returns in place.
@functools.lru_cache(maxsize=1)
def parse_task(path: str, text: str) -> tuple[TaskConfig, torch.Tensor | None, list[Any], str]:
    """(task, eval prompts or None, rejected prompts, digest) of the task file
    ``path``'s ``text``; a :class:`TrainRequestError` when it cannot be used, a
    ValueError when it is not JSON (:func:`read_task`). The digest is the SHA-256 of the
    JSON, keys sorted: the same task, the same digest (the judged episodes' ids)."""
    shape = '{"task": {...}, "eval_prompts": [[tokens], ...]} (see data generate rlhf_ppo)'
    raw = json.loads(text)  # not JSON: a ValueError, refused by read_task
    if not isinstance(raw, dict) or not isinstance(raw.get("task"), dict):
        raise TrainRequestError(f"rlhf_ppo: data {path}: expected {shape}")
    known = {f.name for f in dataclasses.fields(TaskConfig)}
    unknown = sorted(set(raw["task"]) - known)
    if unknown:
        raise TrainRequestError(
            f"rlhf_ppo: data {path}: unknown task fields {unknown}; known: {sorted(known)}"
        )
    task = TaskConfig(**raw["task"])  # known names only, each with a default: no TypeError
    prompts = raw.get("eval_prompts")
    if not isinstance(prompts, list):
        raise TrainRequestError(f"rlhf_ppo: data {path}: expected {shape}")
    good: list[Any] = []
    bad: list[Any] = []
    for prompt in prompts:
        (good if _is_prompt(prompt, task) else bad).append(prompt)
    digest = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()
    return task, torch.tensor(good, dtype=torch.long) if good else None, bad, digest


def _is_prompt(value: Any, task: TaskConfig) -> bool:
    return (
        isinstance(value, list)
        and len(value) == task.prompt_len
        and all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < task.vocab for t in value
        )
    )
