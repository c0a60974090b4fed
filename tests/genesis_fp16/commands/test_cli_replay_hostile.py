"""`genesis-fp16 replay` on hostile bundles: each is refused in one line, exit 2, with
no traceback, and nothing a bundle names is imported or run.

Two markers prove "nothing ran": a module on ``sys.path`` that writes a file when it is
imported, and pickles whose ``__reduce__`` writes a file when unpickled. Every refusal
is checked for the marker files' absence as well as for its one line.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_fork import run_cli
from daemon_harness import FIXTURE_PLUGINS, daemon_env
from minimal_bundles import minimal_bundle

GUARD_PLUGINS = Path(__file__).resolve().parents[2] / "fixtures" / "guard_plugins"
AGENT = "fixture_fault"
MARKER_MODULE = "replay_marker_module"


class _Payload:
    """Unpickled, it would write a marker file (what a hostile bundle would do instead)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (self.marker, "unpickled"))


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """A folder with the fixture agent's data, a marker module on the path, and markers."""
    modules = tmp_path / "modules"
    modules.mkdir()
    imported = tmp_path / "imported.marker"
    (modules / f"{MARKER_MODULE}.py").write_text(
        f"from pathlib import Path\nPath({str(imported)!r}).write_text('imported')\n"
        "from typing import NamedTuple\nclass Thing(NamedTuple):\n    x: int = 0\n"
    )
    data = tmp_path / "samples.pt"
    torch.save({"x": torch.zeros(8, 4), "y": torch.zeros(8, 1)}, data)
    return {
        "root": tmp_path,
        "modules": modules,
        "data": data,
        "imported": imported,
        "unpickled": tmp_path / "unpickled.marker",
    }


def _bundle(path: Path, world: dict[str, Path], **changes: Any) -> Path:
    """A minimal bundle of the fixture agent (every key load_bundle needs), changed."""
    request = {"data_path": str(world["data"]), "seed": 0}
    bundle = minimal_bundle(AGENT, request, **changes)
    torch.save(bundle, path)
    return path


def _refused(world: dict[str, Path], bundle: Path | str, *fragments: str) -> str:
    """Run replay on ``bundle``: exit 2, one line, the fragments in it, nothing ran."""
    env = daemon_env(
        {
            "GENESIS_FP16_STATE_DIR": str(world["root"] / "state"),
            "PYTHONPATH": os.pathsep.join(
                map(str, (world["modules"], GUARD_PLUGINS, FIXTURE_PLUGINS))
            ),
            "GENESIS_FP16_PLUGIN_ALLOWLIST": f"{AGENT},se_darwin",
        },
        fixtures=False,
    )
    done = run_cli(
        ["replay", str(bundle)],
        cwd=world["root"],
        env=env,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("genesis-fp16: error: "), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0]
    assert not world["imported"].exists(), "a module the bundle names was imported"
    assert not world["unpickled"].exists(), "a pickle in the bundle was run"
    return lines[0]


def test_a_batch_type_naming_any_module_is_refused_before_any_import(
    world: dict[str, Path],
) -> None:
    """A batch tagged with a module on the path (one that writes a marker on import) or
    with `this` is refused, naming the type and the agent's declared ones; nothing imported."""
    for name in (f"{MARKER_MODULE}:Thing", "this:x"):
        batch = {"__bundle_type__": name, "fields": {"x": 1}}
        path = _bundle(world["root"] / "typed.fault.pt", world, batches=[batch])
        line = _refused(
            world, path, repr(name), "not one this agent declares", "nothing was imported"
        )
        assert "Zen of Python" not in line


def test_pickle_payloads_are_refused_unrun(world: dict[str, Path]) -> None:
    """A bare pickle and a torch.save archive holding an object whose reduce writes a
    marker are both refused in one line, and the marker is never written."""
    bare = world["root"] / "bare.fault.pt"
    bare.write_bytes(pickle.dumps(_Payload(world["unpickled"])))
    _refused(world, bare, "not a torch.save zip archive")
    inside = _bundle(
        world["root"] / "inside.fault.pt", world, batches=[_Payload(world["unpickled"])]
    )
    _refused(world, inside, "it holds a pickled object, not plain data", "not loaded")


def test_damaged_and_odd_files_are_refused(world: dict[str, Path]) -> None:
    """Truncated, huge (sparse, over the 8 GiB bound), a link, a folder, plain text and a
    missing file: each one line naming the file and a readable reason."""
    root = world["root"]
    whole = _bundle(root / "whole.fault.pt", world)
    truncated = root / "truncated.fault.pt"
    truncated.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    _refused(world, truncated, str(truncated), "damaged or truncated zip archive")
    huge = root / "huge.fault.pt"
    with open(huge, "wb") as f:
        f.truncate(9 * 2**30)  # sparse: no disk used
    _refused(world, huge, str(huge), "over the 8589934592-byte bound")
    link = root / "link.fault.pt"
    link.symlink_to(whole)
    _refused(world, link, str(link), "a symbolic link")
    _refused(world, root / "modules", "not a regular file")
    text = root / "text.fault.pt"
    text.write_text("hello, not a bundle\n")
    _refused(world, text, "not a torch.save zip archive")
    _refused(world, root / "missing.fault.pt", "cannot be read (No such file or directory)")


def test_a_bundle_whose_data_is_gone_is_refused_in_one_line(world: dict[str, Path]) -> None:
    """The fixture agent rebuilds its step from its data: the data gone, replay says the
    agent cannot rebuild it and that the data is gone, in one line."""
    gone = world["root"] / "gone.pt"
    request = {"data_path": str(gone), "seed": 0}
    signature = {"path": str(gone), "bytes": 10, "sha256": "0" * 64}
    path = _bundle(
        world["root"] / "gone.fault.pt",
        world,
        context={"agent": AGENT, "request": request},
        data=signature,
    )
    _refused(world, path, "cannot rebuild the bundle's step", f"the bundle's data {gone} is gone")


def test_se_darwin_with_etc_passwd_as_data_is_refused_in_one_line(world: dict[str, Path]) -> None:
    """A bundle naming se_darwin, /etc/passwd as its data and no model record is refused
    in one line (se_darwin never reads a bundle's data: it rebuilds from the record)."""
    request = {"data_path": "/etc/passwd", "seed": 0}
    path = _bundle(
        world["root"] / "passwd.fault.pt", world, context={"agent": "se_darwin", "request": request}
    )
    _refused(world, path, "'se_darwin' cannot rebuild", "no model record")


def test_an_agent_not_allowed_and_a_nonsense_name_are_refused(world: dict[str, Path]) -> None:
    """An agent outside the allowlist and a name that is no agent name: one line each."""
    request = {"data_path": str(world["data"])}
    other = _bundle(
        world["root"] / "other.fault.pt", world, context={"agent": "rlhf_ppo", "request": request}
    )
    _refused(world, other, "rlhf_ppo")
    odd = _bundle(
        world["root"] / "odd.fault.pt", world, context={"agent": "os:system", "request": request}
    )
    _refused(world, odd, "names no agent")
