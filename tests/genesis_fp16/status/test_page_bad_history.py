"""A history line no clock can show (finished_at 1e308) or not UTF-8: the real daemon's
`/` and `/status.json` answer 200, that line skipped and counted on the page."""

from __future__ import annotations

import json
from pathlib import Path

from daemon_harness import start_daemon
from status_pages import HOSTILE_AGENT, seed_hostile_agent

from genesis_fp16.status.when import clock
from genesis_fp16_infrastructure.agent_folder.run_history import decode_entry
from genesis_fp16_infrastructure.folder import AgentFolder


def _spoil(state_dir: Path) -> AgentFolder:
    """The hostile agent's history with two bad lines after its good one: a run that
    finished at 1e308 (valid JSON) and one whose reason holds bytes that are not UTF-8;
    its last run finished at 1e308 too."""
    root = seed_hostile_agent(state_dir)
    folder = AgentFolder.at(root)
    path = folder.history_path
    good = path.read_bytes().splitlines()[-1]
    huge = json.loads(good)
    huge["run"]["finished_at"] = 1e308
    not_utf8 = good.replace(b"alert", b"al\xff\xfert")
    with path.open("ab") as stream:
        stream.write(json.dumps(huge, separators=(",", ":")).encode() + b"\n" + not_utf8 + b"\n")
    last = root / "last_run.json"
    last.write_text(last.read_text().replace("1700000000.0", "1e308"))
    return folder


def test_bad_history_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    """Either line reads as no entry; the good line stays; two are counted unreadable."""
    folder = _spoil(tmp_path)
    lines = folder.history_path.read_bytes().splitlines()
    assert [decode_entry(line) is None for line in lines] == [False, True, True]
    found = folder.history()
    assert (len(found.entries), found.unreadable) == (1, 2)
    assert clock(1e308) == "not a time (1e+308)"


def test_the_real_page_answers_200_on_bad_history_lines(tmp_path: Path) -> None:
    """`/` and `/status.json` of a real daemon answer 200 over the spoilt folder, with the
    agent shown and its two bad history lines counted as a problem row."""
    _spoil(tmp_path / "state")
    daemon = start_daemon(
        tmp_path,
        {"GENESIS_FP16_PLUGIN_ALLOWLIST": "", "GENESIS_FP16_RUN_AT_START": "false"},
        fixtures=False,
    )
    try:
        code, page = daemon.get("/")
        assert code == 200, page
        assert "run history: 2 line(s) unreadable, skipped" in page
        code, body = daemon.get("/status.json")
        assert code == 200, body
        (agent,) = [a for a in json.loads(body)["agents"] if a["name"] == HOSTILE_AGENT]
        assert "run history: 2 line(s) unreadable, skipped" in agent["problems"]
    finally:
        daemon.stop()
