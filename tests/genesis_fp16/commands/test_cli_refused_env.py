"""Every command of the parser on a refused `.env`, as real processes (tests/cli_fork.py):
the commands that read go on with the file's other lines and say so in one line on
stderr; the commands that act refuse in one line naming the bad setting and change
nothing (genesis_fp16/commands/reading.py's ``SETTINGS_USE``, held to the parser here)."""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
import torch
from cli_fork import run_cli
from daemon_harness import DaemonFactory, DaemonProcess, daemon_env
from minimal_bundles import minimal_bundle
from se_darwin_daemon import AGENT, se_darwin_env, write_pool

from genesis_fp16.cli import build_parser
from genesis_fp16.commands.reading import (
    ACTS,
    CHECKS,
    NO_SETTINGS,
    READS,
    SETTINGS_USE,
    commands_that,
)
from genesis_fp16_infrastructure.agent_folder import outbox
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.training.precision.precision_memory import PrecisionMemory

TYPO = "ENABLE_FP16_TRAINIG"  # the rollback switch, misspelt: what the file is refused for
# The file's good lines, which the commands that read must use: a state folder of its
# own, and an allowlist without se_darwin (each plugin refusal proves it was read).
ENV_FILE = (
    f"GENESIS_FP16_STATE_DIR=kept-state\nGENESIS_FP16_PLUGIN_ALLOWLIST=rlhf_ppo\n{TYPO}=false\n"
)
NOT_ALLOWED = "se_darwin"  # installed, not in the file's allowlist
# new-agent's name: one no reader has installed (the README's plugin block installs the
# name the reader chose, my_agent as written, which new-agent would then refuse).
NEW_AGENT = f"refused_env_{uuid.uuid4().hex[:12]}"
REFUSED_PLUGIN = "'se_darwin' is not in GENESIS_FP16_PLUGIN_ALLOWLIST"

# Each command's words (BUNDLE: the test's fault bundle, EVENT: its event's id), its
# exit code on the refused file, and what its output shows of the file's other lines (a
# command that acts shows nothing of them: its checks are its one line and the folder
# left as it was). A command missing here fails test_every_command_meets_a_refused_env_file,
# saying so.
ROWS: dict[str, tuple[tuple[str, ...], int, str]] = {
    "serve": (("serve",), 2, ""),
    "status": (("status", "--json"), 0, "kept-state"),
    "run": (("run", "se_darwin"), 2, "no daemon runs on the state folder kept-state"),
    "train": (("train", "se_darwin", "--steps", "1"), 2, ""),
    "data generate": (("data", "generate", "rlhf_ppo", "--out", "out"), 2, ""),
    "agents": (("agents", "--json"), 0, '"state": "not_allowed"'),
    "config check": (("config", "check"), 2, "GENESIS_FP16_STATE_DIR=kept-state  # .env"),
    "probe": (("probe", NOT_ALLOWED), 2, REFUSED_PLUGIN),
    "bench": (("bench", "--device", "tpu"), 2, "--device 'tpu'"),
    "precision show": (("precision", "show", "se_darwin", "--json"), 0, '"demoted_to": "bf16"'),
    "precision reset": (("precision", "reset", "se_darwin"), 2, ""),
    "replay": (("replay", "BUNDLE"), 2, REFUSED_PLUGIN),
    "new-agent": (("new-agent", NEW_AGENT), 0, NEW_AGENT.replace("_", "-")),
    "check-agent": (("check-agent", NOT_ALLOWED), 2, REFUSED_PLUGIN),
    "model list": (("model", "list", "se_darwin"), 0, "kept-state/agents/se_darwin/checkpoints"),
    "model promote": (("model", "promote", "se_darwin", "c1"), 2, ""),
    "model rollback": (("model", "rollback", "se_darwin"), 2, ""),
    "model unpin": (("model", "unpin", "se_darwin"), 2, ""),
    "events list": (("events", "list", "--json"), 0, "EVENT"),
    "events redeliver": (("events", "redeliver", "EVENT"), 2, ""),
}


def command_words(parser: argparse.ArgumentParser) -> list[str]:
    """Every command ``parser`` runs, as typed (``model list``), in its order."""
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                inner = command_words(sub)
                found += [f"{name} {words}" for words in inner] if inner else [name]
    return found


def unclassified(parser: argparse.ArgumentParser, table: dict[str, str]) -> list[str]:
    """The parser's commands the table does not classify, then the table's stale ones."""
    words = command_words(parser)
    return [w for w in words if w not in table] + [w for w in table if w not in words]


def test_every_command_of_the_parser_is_classified() -> None:
    """SETTINGS_USE names every command of the parser, and nothing else."""
    assert unclassified(build_parser(), SETTINGS_USE) == []
    assert set(SETTINGS_USE.values()) == {READS, ACTS, CHECKS, NO_SETTINGS}


def test_a_new_command_missing_from_the_table_is_named() -> None:
    """The check can fail: a command added to the parser without a class is named, and
    so is a class left for a command that is gone."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    history = subparsers.add_parser("history").add_subparsers(dest="what")
    history.add_parser("show")
    table = {**SETTINGS_USE, "gone": READS}
    assert unclassified(parser, table) == ["history show", "gone"]


@pytest.fixture
def world(tmp_path: Path) -> dict[str, object]:
    """A working folder with the refused .env and, in the state folder its good line
    names, se_darwin's remembered demotion and one event in its outbox."""
    (tmp_path / ".env").write_text(ENV_FILE)
    agent = AgentFolder(tmp_path / "kept-state", "se_darwin")
    agent.root.mkdir(parents=True)
    demotion = PrecisionMemory("fp16", "bf16", "overflow_rate", 40, 30, "2026-11-25T20:00:00Z")
    agent.save_precision_memory(demotion)
    event = outbox.record(agent.root, "promoted", {"candidate": "c1"})
    bundle = tmp_path / "se_darwin.fault.pt"
    torch.save(minimal_bundle(NOT_ALLOWED, {"seed": 0}), bundle)
    return {"root": tmp_path, "bundle": str(bundle), "event": event}


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and a digest of its bytes: what "changed nothing" means."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("command", list(SETTINGS_USE))
def test_every_command_meets_a_refused_env_file(world: dict[str, object], command: str) -> None:
    """Per SETTINGS_USE: a reader's first stderr line is the one warning and its output
    shows the file's other lines; an actor and the checker exit 2 naming the typo; a
    command without settings never mentions it. Actors change nothing in the folder."""
    assert command in ROWS, f"{command}: give it a row (its words, exit code, what it shows)"
    words, code, shows = ROWS[command]
    root = Path(str(world["root"]))
    named = {"BUNDLE": str(world["bundle"]), "EVENT": str(world["event"])}
    words = tuple(named.get(w, w) for w in words)
    shows = named.get(shows, shows)
    before = _snapshot(root)
    done = _cli(root, *words)
    lines = done.stderr.splitlines()
    assert done.returncode == code, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert shows in done.stdout + done.stderr, (done.stdout[-2000:], done.stderr[-2000:])
    use = SETTINGS_USE[command]
    if use == READS:
        warning = f"genesis-fp16: warning: {(root / '.env').resolve()} is refused ("
        assert lines[0].startswith(warning) and lines[0].endswith(f"(left out: {TYPO})")
        assert "invalid configuration" not in done.stderr and len(lines) <= 2, lines
    elif use in (ACTS, CHECKS):
        assert lines[0].startswith("genesis-fp16: error: ") and TYPO in lines[0], lines
        assert "did you mean ENABLE_FP16_TRAINING?" in lines[0]
    if use == ACTS:
        assert len(lines) == 1, lines
        assert _snapshot(root) == before  # the state folder as it was, no --out written
    if use == NO_SETTINGS:
        assert TYPO not in done.stderr and "warning" not in done.stderr, lines


def test_json_output_stays_one_object_on_stdout(world: dict[str, object]) -> None:
    """With --json the warning stays on stderr: each reader's stdout is JSON alone."""
    root = Path(str(world["root"]))
    for words in (("events", "list", "--json"), ("precision", "show", "se_darwin", "--json")):
        done = _cli(root, *words)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) and "is refused" in done.stderr


def test_a_refused_allowlist_imports_no_plugin_it_left_out(tmp_path: Path) -> None:
    """An allowlist refused for one bad name: `agents` loads the names it got right and
    imports none of the others (rlhf_ppo stays not_allowed), and its warning says so."""
    (tmp_path / ".env").write_text("GENESIS_FP16_PLUGIN_ALLOWLIST=se_darwin,../evil\n")
    done = _cli(tmp_path, "agents", "--json")
    assert done.returncode == 0, done.stderr
    states = {row["name"]: row["state"] for row in json.loads(done.stdout)}
    assert states["se_darwin"] == "loaded" and states["rlhf_ppo"] == "not_allowed"
    (line,) = done.stderr.splitlines()
    assert line.endswith("GENESIS_FP16_PLUGIN_ALLOWLIST's valid names only (se_darwin)")


def test_config_check_names_the_commands_that_read_and_act(world: dict[str, object]) -> None:
    """The checker, beside the settings the readers use, says which commands read them
    and which refuse: the table's lists, as text and as JSON."""
    root = Path(str(world["root"]))
    for words in (("config", "check"), ("config", "check", "--json")):
        done = _cli(root, *words)
        assert done.returncode == 2, done.stderr
        if "--json" in words:
            used = json.loads(done.stdout)["used_instead"]
            assert used["read_by"] == commands_that(READS)
            assert used["refused_by"] == commands_that(ACTS)
        else:
            assert f"# read by: {', '.join(commands_that(READS))}" in done.stdout.splitlines()


def test_the_documented_list_is_the_table() -> None:
    """docs/configuration.md lists the commands that read and those that act, as the
    table has them (a command moved in one and not the other fails here)."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    for use, label in ((READS, "Read"), (ACTS, "Act")):
        (line,) = [x for x in text.splitlines() if x.startswith(f"- **{label}")]
        listed = [w.strip("`") for w in line.split(": ", 1)[1].rstrip(".").split(", ")]
        assert listed == commands_that(use), line


@pytest.mark.slow
def test_beside_a_daemon_that_refused_a_reload(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """se_darwin trained and promoted by a real daemon on its own data; a typo in .env is
    refused on SIGHUP; then `precision show` and `events list` read that folder (the
    promotion listed), while `events redeliver` and `precision reset` refuse, changing
    nothing in the outbox."""
    pool = tmp_path / "pool"
    pool.mkdir()
    write_pool(pool / "se_darwin.json", generate_pool(300, seed=4))
    daemon = daemon_factory(
        se_darwin_env(pool, GENESIS_FP16_WATCH_ENV_FILE="false"), fixtures=False
    )
    outbox_folder = daemon.state_dir / "agents" / AGENT
    daemon.wait_for(
        lambda: any(e.kind == "promote" for e in outbox.read_events(outbox_folder)),
        "the first promotion",
        240,
    )
    (tmp_path / ".env").write_text(f"{TYPO}=false\n")
    daemon.signal(signal.SIGHUP)
    daemon.wait_for(
        lambda: daemon.sample("genesis_fp16_config_reloads_total", outcome="failure") == 1,
        "the refused reload",
    )
    listed = _beside(daemon, "events", "list", "--json")
    assert listed.returncode == 0 and "is refused" in listed.stderr, listed.stderr
    promotion = next(e for e in json.loads(listed.stdout) if e["kind"] == "promote")
    shown = _beside(daemon, "precision", "show", AGENT)
    assert shown.returncode == 0 and "is refused" in shown.stderr, shown.stderr
    assert shown.stdout.startswith(f"{AGENT}: no precision demotion remembered")
    # The daemon's delivery writes each new event once more, to address it to the
    # receivers configured (none here): after that, nothing but a command writes it.
    daemon.wait_for(
        lambda: all(e.targets is not None for e in outbox.read_events(outbox_folder)),
        "every event addressed",
    )
    before = _snapshot(outbox_folder / "outbox")
    for words in (("events", "redeliver", promotion["id"]), ("precision", "reset", AGENT)):
        refused = _beside(daemon, *words)
        assert refused.returncode == 2 and TYPO in refused.stderr, (words, refused.stderr)
    assert _snapshot(outbox_folder / "outbox") == before


def _beside(daemon: DaemonProcess, *words: str) -> subprocess.CompletedProcess[str]:
    """A command in the daemon's working folder (its .env, its ./state)."""
    return _cli(daemon.workdir, *words)


def _cli(folder: Path, *words: str) -> subprocess.CompletedProcess[str]:
    """`genesis-fp16 WORDS` in ``folder`` (its .env), with no setting from this process."""
    return run_cli(words, cwd=folder, env=daemon_env({}, fixtures=False), timeout=180)
