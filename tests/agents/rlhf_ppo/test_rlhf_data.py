"""rlhf_ppo's --data is refused as se_darwin's is: one line naming the file, exit 2; bad
eval prompts are quarantined and counted, not a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from genesis_fp16.plugin_api import TrainRequestError
from genesis_fp16_agents.rlhf_ppo import plugin
from genesis_fp16_agents.rlhf_ppo.plugin import read_task


def _train(cwd: Path, data: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(GENESIS_FP16_STATE_DIR=str(cwd / "state"), GENESIS_FP16_LOG_LEVEL="WARNING")
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "train", "rlhf_ppo", "--data", str(data), *extra],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("folder", None),
        ("binary.json", b"\x00\xff\xfe binary"),
        ("invalid.json", b'{"task": {'),
        ("schema.json", b'{"tasks": []}'),
        ("fields.json", b'{"task": {"vocab": 10, "layers": 3}, "eval_prompts": []}'),
        ("prompts.json", b'{"task": {}, "eval_prompts": [[1, 2], "x"]}'),
    ],
)
def test_unusable_data_is_one_line_naming_the_file_and_exit_2(
    tmp_path: Path, name: str, content: bytes | None
) -> None:
    """A folder, binary bytes, invalid JSON, another schema, unknown fields, no usable prompt."""
    data = tmp_path / name
    if content is None:
        data.mkdir()
    else:
        data.write_bytes(content)
    done = _train(tmp_path, data, "--steps", "1")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(data) in lines[0]


def test_bad_eval_prompts_are_quarantined_and_counted(tmp_path: Path) -> None:
    """Prompts of the wrong length or out of the vocabulary go to the quarantine file."""
    path = plugin.generate_sample_data(tmp_path / "data", 8, seed=0)
    doc = json.loads(path.read_text())
    doc["eval_prompts"] += [[1, 2], [99, 0, 0, 0], "text"]
    path.write_text(json.dumps(doc))
    quarantine = tmp_path / "q.jsonl"
    _, prompts, skipped, _ = read_task(path, quarantine)
    assert prompts is not None and len(prompts) == 8 and skipped == 3
    kept = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert [k["record"] for k in kept] == [[1, 2], [99, 0, 0, 0], "text"]
    assert all(k["source"] == str(path) for k in kept)


def test_an_unchanged_task_file_is_parsed_once_and_every_read_keeps_its_rejects(
    tmp_path: Path,
) -> None:
    """A judged run reads the task file four times: the same text's second read is the
    first's parse (the same prompts tensor), each read with a quarantine copies the
    rejected prompt there, and a changed file is read afresh. A file with no usable
    prompt is refused after its rejects are kept."""
    path = plugin.generate_sample_data(tmp_path / "data", 8, seed=0)
    doc = json.loads(path.read_text())
    doc["eval_prompts"].append([1, 2])
    path.write_text(json.dumps(doc))
    quarantine = tmp_path / "q.jsonl"
    first, second = read_task(path, quarantine), read_task(path, quarantine)
    assert second[1] is first[1] and second[2] == first[2] == 1
    assert [json.loads(line)["record"] for line in quarantine.read_text().splitlines()] == [
        [1, 2],
        [1, 2],
    ]
    doc["eval_prompts"] = doc["eval_prompts"][:3]
    path.write_text(json.dumps(doc))
    changed = read_task(path, None)[1]
    assert changed is not None and len(changed) == 3
    path.write_text(json.dumps({"task": {}, "eval_prompts": [[1, 2], "x"]}))
    with pytest.raises(TrainRequestError, match="no usable eval prompt of 2"):
        read_task(path, quarantine)
    assert len(quarantine.read_text().splitlines()) == 4
