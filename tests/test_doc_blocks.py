"""Every code block of README.md and docs/*.md runs as written, in the state a reader has
there, or names the test that covers it, or says why it cannot run here (tests/doc_blocks.py).

Two states: a folder where `make run`'s daemon serves (started here as `make run` starts
it, `.venv/bin/genesis-fp16 serve` with no settings, on a free metrics port; it keeps
serving while the blocks run, as a reader's does in another terminal), and a fresh
folder. Both hold the checkout's virtualenv as ``.venv``, and the blocks run with its
``bin`` first on ``PATH``, as after ``source .venv/bin/activate``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from doc_blocks import (
    BLOCKS,
    PRELUDES,
    ROOT,
    SKIP_KINDS,
    Block,
    Covered,
    Run,
    Skip,
    all_blocks,
    collect_blocks,
    plan_of,
)

FOUND = all_blocks()
VENV = Path(sys.prefix)  # the suite's virtualenv: a reader's .venv
# A cheap check per language, on top of the block's plan.
PARSERS = {"json": json.loads, "toml": tomllib.loads, "yaml": yaml.safe_load}


def _params() -> list[object]:
    params = []
    for block in FOUND:
        plan = plan_of(block)
        slow = isinstance(plan, Run) and plan.slow
        params.append(pytest.param(block, id=block.id, marks=[pytest.mark.slow] if slow else []))
    return params


def reader_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A reader's shell: no daemon settings of the caller's, the venv activated."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GENESIS_FP16_")
        and key not in ("ENABLE_FP16_TRAINING", "NOTIFY_SOCKET", "WATCHDOG_USEC")
    }
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV)
    return {**env, **(extra or {})}


def reader_folder(folder: Path) -> Path:
    """``folder`` as a checkout looks to the reader: its ``.venv`` there."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".venv").symlink_to(VENV, target_is_directory=True)
    return folder


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def make_run_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder where `make run`'s daemon serves, its first se_darwin model served."""
    folder = reader_folder(tmp_path_factory.mktemp("make-run"))
    log = folder / "daemon.log"
    env = reader_env({"GENESIS_FP16_METRICS_PORT": str(_free_port())})
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [str(VENV / "bin" / "genesis-fp16"), "serve"],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    served = folder / "state" / "agents" / "se_darwin" / "checkpoints" / "served.json"
    try:
        deadline = time.monotonic() + 900  # generous: both agents' first runs, a busy CI
        while not served.exists():
            tail = log.read_text(errors="replace")[-4000:]
            assert daemon.poll() is None, f"make run's daemon exited:\n{tail}"
            assert time.monotonic() < deadline, f"no se_darwin model served:\n{tail}"
            time.sleep(0.2)
        yield folder
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=120)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def run_block(block: Block, plan: Run, folder: Path) -> subprocess.CompletedProcess[str]:
    """The block's text, unedited: bash for a shell block, the venv's python else."""
    if block.language in ("sh", "bash"):
        command = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    elif block.language == "python":
        prelude = PRELUDES[plan.prelude] if plan.prelude else ""
        command = [str(VENV / "bin" / "python"), "-c", prelude + "\n" + block.text]
    else:
        raise AssertionError(f"{block.id}: no way to run a {block.language!r} block")
    scratch = folder / "tmp"  # a block's `mktemp -d` lands here, cleaned with the folder
    scratch.mkdir(exist_ok=True)
    return subprocess.run(
        command,
        cwd=folder,
        env=reader_env({"TMPDIR": str(scratch), **plan.env}),
        capture_output=True,
        text=True,
        timeout=900,
    )


def assert_test_exists(test: str) -> None:
    """``path::function`` (or a path alone) names a test of this suite."""
    path, _, function = test.partition("::")
    assert (ROOT / path).is_file(), f"{test}: no such file"
    if function:
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {re.escape(function)}\(", source, flags=re.M), (
            f"{test}: no such test"
        )


@pytest.mark.parametrize("block", _params())
def test_doc_block(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The block runs as written and exits 0, or names its covering test, or why not."""
    plan = plan_of(block)
    assert plan is not None, (
        f"{block.file} line {block.line} ({block.language or 'untagged'}): "
        f"{block.key_line!r} is in no table: add it to BLOCKS in tests/doc_blocks.py, run "
        "as written, covered by a named test, or skipped with the reason"
    )
    if block.language in PARSERS:
        PARSERS[block.language](block.text)
    if isinstance(plan, Skip):
        assert plan.kind in SKIP_KINDS, plan.kind
        pytest.skip(f"{plan.kind}: {plan.why}")
    if isinstance(plan, Covered):
        assert_test_exists(plan.test)
        pytest.skip(f"covered by {plan.test}: {plan.why}")
    if plan.state == "make-run":
        folder = request.getfixturevalue("make_run_state")
    else:
        folder = reader_folder(tmp_path / "reader")
    done = run_block(block, plan, folder)
    assert done.returncode == 0, (
        f"{block.id} (line {block.line}) exited {done.returncode}:\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


def test_every_table_entry_names_one_block_of_the_docs() -> None:
    """No entry of BLOCKS outlives its block, nor names two: each starts one block's line."""
    for (file, start), _ in BLOCKS.items():
        matches = [b.id for b in FOUND if b.file == file and b.key_line.startswith(start)]
        assert len(matches) == 1, f"BLOCKS entry {(file, start)!r} names {matches or 'no block'}"


def test_no_two_blocks_of_a_file_share_their_key_line() -> None:
    """Each block has its own entry: two blocks of a file never open with the same line."""
    keys = [(block.file, block.key_line) for block in FOUND]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_the_collector_finds_fenced_untagged_and_indented_blocks(tmp_path: Path) -> None:
    """Tagged, untagged and indented blocks are found; a list's continuation is not one."""
    doc = tmp_path / "collector-test.md"
    text = (
        "# t\n\n```sh\necho a\n```\n\n```\nplain\n```\n\nSay:\n\n    indented run\n"
        "    more\n\n- an item\n\n    its continuation\n"
    )
    doc.write_text(text)
    found = [(b.language, b.text) for b in collect_blocks(doc, tmp_path)]
    assert found == [("sh", "echo a"), ("", "plain"), ("indented", "indented run\nmore")]


def test_a_block_in_no_table_has_no_plan() -> None:
    """A new block (here, a changed first line) has no plan, so test_doc_block fails on it."""
    block = FOUND[0]
    changed = Block(block.file, block.index, block.line, block.language, "echo new\n")
    assert plan_of(block) is not None and plan_of(changed) is None
