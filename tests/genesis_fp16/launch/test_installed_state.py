"""The digest of what is installed on a path (genesis_fp16/launch/installed_state.py)
changes with an install, an uninstall or an upgrade, and with nothing else."""

from __future__ import annotations

import os
from pathlib import Path

from genesis_fp16.launch.installed_state import installed_digest


def _touch_later(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_the_digest_follows_installs_and_upgrades_but_not_bytecode(tmp_path: Path) -> None:
    """A new .pth file, module or dist-info folder changes it; a rewritten RECORD (an
    in-place upgrade) or .pth changes it; a new __pycache__ (any import writes one) and an
    untouched folder do not; a missing folder on the path is a state of its own."""
    site = tmp_path / "site"
    site.mkdir()
    paths = [str(site), str(tmp_path / "not-yet")]
    seen = [installed_digest(paths)]
    (site / "__pycache__").mkdir()
    assert installed_digest(paths) == seen[-1]
    info = site / "agent-0.1.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("agent.py,,\n")
    seen.append(installed_digest(paths))
    _touch_later(info / "RECORD")
    seen.append(installed_digest(paths))
    (site / "__editable__.agent-0.1.pth").write_text("/somewhere\n")
    seen.append(installed_digest(paths))
    _touch_later(site / "__editable__.agent-0.1.pth")
    seen.append(installed_digest(paths))
    (site / "agent.py").write_text("plugin = None\n")
    seen.append(installed_digest(paths))
    (tmp_path / "not-yet").mkdir()
    seen.append(installed_digest(paths))
    assert len(set(seen)) == len(seen)
    assert installed_digest(paths) == seen[-1]
