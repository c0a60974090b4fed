"""A virtualenv of a reader's own, made in seconds from the suite's: what a test needs
to follow the README's `pip install` lines without changing the suite's `.venv`.

The new venv sees the suite's packages (torch, genesis-fp16, pip: nothing is downloaded)
through a folder of links to the suite's site-packages, less every agent plugin a reader
may have installed there (the README's `pip install -e ./my-agent` into `.venv`): the
new venv starts as `make setup` leaves one, whatever the suite's venv holds since.
"""

from __future__ import annotations

import sysconfig
import venv
from importlib import metadata
from pathlib import Path, PurePosixPath

AGENTS_GROUP = "genesis_fp16.agents"


def plugin_entries(site: Path, keep: tuple[str, ...] = ("genesis-fp16",)) -> set[str]:
    """The top-level names in ``site`` that belong to installed agent plugins: each
    distribution registering a ``genesis_fp16.agents`` entry point, but ``keep``'s."""
    found: set[str] = set()
    for dist in metadata.distributions(path=[str(site)]):
        name = dist.metadata["Name"] or ""
        if name in keep or not any(ep.group == AGENTS_GROUP for ep in dist.entry_points):
            continue
        for file in dist.files or ():
            parts = PurePosixPath(str(file)).parts
            # Scripts in bin/ are not site-packages'; __pycache__ is everyone's.
            if parts and parts[0] not in ("..", "__pycache__"):
                found.add(parts[0])
    return found


def site_view(view: Path, keep: tuple[str, ...] = ("genesis-fp16",)) -> Path:
    """``view``: a link to each entry of the suite's site-packages but the plugins'."""
    ours = Path(sysconfig.get_paths()["purelib"])
    skipped = plugin_entries(ours, keep)
    view.mkdir(parents=True)
    for entry in ours.iterdir():
        if entry.name not in skipped:
            (view / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return view


def make_reader_venv(folder: Path, keep: tuple[str, ...] = ("genesis-fp16",)) -> Path:
    """A venv at ``folder`` seeing the suite's packages but its plugins (and ``keep``'s
    plugins only: pass ``()`` to leave genesis-fp16 out too, to install another copy),
    with the suite's commands in its ``bin`` (``pip``, ``ruff``, ...). Returns its python."""
    venv.EnvBuilder(with_pip=False).create(folder)
    python = folder / "bin" / "python"
    site = Path(sysconfig.get_paths(vars={"base": str(folder), "platbase": str(folder)})["purelib"])
    view = site_view(folder / "suite-site", keep)
    # addsitedir, not a plain path: the suite's editable installs are .pth files there.
    (site / "suite-site.pth").write_text(f"import site; site.addsitedir({str(view)!r})\n")
    copy_scripts(folder / "bin", python, keep)
    return python


def copy_scripts(bin_dir: Path, python: Path, keep: tuple[str, ...]) -> None:
    """The suite's commands into ``bin_dir``, as installing them there would: a Python
    script runs ``python`` (its first line), a native one (ruff) is linked. genesis-fp16's
    own is left to its install when ``keep`` leaves genesis-fp16 out."""
    ours = Path(sysconfig.get_paths()["scripts"])
    skip = {"genesis-fp16"} if "genesis-fp16" not in keep else set()
    for script in sorted(ours.iterdir()):
        target = bin_dir / script.name
        if target.exists() or script.name in skip or script.name.startswith("activate"):
            continue
        head = script.read_bytes()[:2]
        if head == b"#!":
            body = script.read_text().split("\n", 1)[1]
            target.write_text(f"#!{python}\n{body}")
            target.chmod(0o755)
        elif head == b"\x7fE":  # ELF: a native command
            target.symlink_to(script)
