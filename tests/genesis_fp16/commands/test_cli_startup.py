"""`genesis-fp16 --help`, each command's --help and `config check` start without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from daemon_harness import daemon_env

from genesis_fp16.cli import COMMAND_MODULES

# Runs the real CLI entry point in a fresh interpreter, then reports whether torch loaded
# (LOADED below reports the modules instead).
PROBE = """
import sys
from genesis_fp16.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(f"exit={code} torch={'torch' in sys.modules}")
"""


# Each command line of the torch check, the whole parser's --help last: it loads every
# command module, which each command's own --help before it loads alone.
STARTS = [
    ("config", "check"),
    *((name.replace("_", "-"), "--help") for name in COMMAND_MODULES),
    ("--help",),
]
# Runs each command line of argv (JSON) through the real CLI entry point in turn, in one
# fresh interpreter, reporting whether torch is loaded after each. torch, once loaded,
# stays: the first command line that loads it is the first to say so.
EACH = """
import json, sys
from genesis_fp16.cli import main
for args in json.loads(sys.argv[1]):
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    print(" ".join(args), f"exit={code} torch={'torch' in sys.modules}", sep=": ")
"""


def test_cli_starts_without_importing_torch(tmp_path: Path) -> None:
    """The parser and `config check` never import torch (1.8 s of a 2.3 s --help): each
    command's --help, `config check` and the whole --help, one after another in one fresh
    interpreter (a process each took 1 s apiece)."""
    result = subprocess.run(
        [sys.executable, "-c", EACH, json.dumps(STARTS)],
        cwd=tmp_path,
        env=daemon_env({}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stdout.splitlines() if ": exit=" in line]
    assert said == [f"{' '.join(args)}: exit=0 torch=False" for args in STARTS], said


def test_probe_optimizer_choices_match_the_probe() -> None:
    """The probe command's --optimizer choices are the probe runner's own list."""
    from genesis_fp16.commands.probe import OPTIMIZERS
    from genesis_fp16_infrastructure.probe.runner import OPTIMIZERS as RUNNER_OPTIMIZERS

    assert OPTIMIZERS == RUNNER_OPTIMIZERS


# As PROBE, reporting the command modules and prometheus_client the start loaded.
LOADED = PROBE.replace(
    "print(f\"exit={code} torch={'torch' in sys.modules}\")",
    "print(sorted(m for m in sys.modules if m.startswith('genesis_fp16.commands.')"
    " or m == 'prometheus_client'))",
)


# The train command's own modules: the command and what it refuses and shows.
TRAIN_MODULES = ["train", "train_checks"]
# Other commands' own helper modules, which --help loads with their command.
# Each command's settings, and the folder of the agent it names.
HELPER_MODULES = ["reading"]


def test_train_starts_without_the_other_commands_or_prometheus(tmp_path: Path) -> None:
    """`train` (each child run, each torchrun rank) loads its own command only; --help, all."""
    own = [f"genesis_fp16.commands.{m}" for m in TRAIN_MODULES]
    assert _start_loaded(tmp_path, "train", "--help") == str(own)
    everything = _start_loaded(tmp_path, "--help")
    commands = {*COMMAND_MODULES, *TRAIN_MODULES, *HELPER_MODULES}
    assert everything == str(sorted(f"genesis_fp16.commands.{m}" for m in commands))


def _start_loaded(tmp_path: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", LOADED, *args],
        cwd=tmp_path,
        env=daemon_env({}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.stdout.strip().splitlines()[-1]
