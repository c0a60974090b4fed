"""`genesis-fp16 status [--json]`: what the daemon is doing and what each agent serves.

With a daemon running on the state folder, the report is the one its page at ``/``
shows (asked from ``/status.json`` at the configured address): health and next runs come
from the daemon itself. Without one, it is read from the state folder, and says so.
"""

from __future__ import annotations

import argparse
import json
import ssl
import urllib.request
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: `genesis-fp16 train` loads none of this
    from genesis_fp16.config.settings import Settings
    from genesis_fp16.status.report import DaemonStatus, StatusReport

MAX_REPORT_BYTES = 8 * 1024 * 1024
NO_DAEMON = "none: no daemon runs on this state folder (`genesis-fp16 serve` schedules runs)"
# The rollback switch as a report read without the daemon says it: these settings' (a
# daemon that did not answer reads them at its next reload; `train` reads them now).
FOLDER_ROLLBACK = (
    "on in these settings: ENABLE_FP16_TRAINING=false, the next run started with them "
    "trains in fp32"
)
ASK_TIMEOUT = 10.0  # seconds: the daemon answers in milliseconds unless it is stuck


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="show the daemon, and each agent's served model, last run and next run",
        description=__doc__.splitlines()[0].split(": ", 1)[1] if __doc__ else None,
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from genesis_fp16.commands.reading import command_settings
    from genesis_fp16.status.render import render_text

    settings = command_settings("status")  # a refused .env: its other lines, said on stderr
    report = read_report(settings)
    if args.json:
        print(json.dumps(report.to_json(), allow_nan=False, indent=2))
    else:
        print(render_text(report))
    return 0


def read_report(settings: Settings) -> StatusReport:
    """The daemon's report when one runs and answers; otherwise the state folder's."""
    from genesis_fp16.status.serving import owner_status

    daemon = owner_status(settings.state_dir)
    if not daemon.running:
        return _folder_report(settings, daemon, NO_DAEMON)
    url = status_url(settings)
    try:
        report = _ask(url)
    except (OSError, ValueError) as exc:  # a refused or timed-out connection, a bad answer
        why = f"unknown: the daemon did not answer {url} ({exc})"
        return _folder_report(settings, replace(daemon, health=why), why)
    if report.daemon.pid != daemon.pid:  # another daemon on that port, another folder's
        why = (
            f"unknown: {url} is served by pid {report.daemon.pid} for {report.state_dir}, "
            f"not by pid {daemon.pid}, which owns this state folder"
        )
        return _folder_report(settings, replace(daemon, health=why), why)
    return report


def status_url(settings: Settings) -> str:
    """Where the daemon of ``settings`` serves its report (a wildcard address: this host)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(
        settings.metrics_addr, settings.metrics_addr
    )
    host = f"[{host}]" if ":" in host else host
    scheme = "https" if settings.tls_cert_file is not None else "http"
    return f"{scheme}://{host}:{settings.metrics_port}/status.json"


def _ask(url: str) -> StatusReport:
    from genesis_fp16.status.report import StatusReport

    # The report is what the page shows anyone who can reach the port, and nothing is
    # sent: the daemon's own certificate is not checked against a host name it may lack.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=ASK_TIMEOUT, context=context) as answer:
        body = answer.read(MAX_REPORT_BYTES + 1)
    if len(body) > MAX_REPORT_BYTES:
        raise ValueError(f"an answer over {MAX_REPORT_BYTES} bytes")
    try:
        return StatusReport.from_json(json.loads(body))
    except Exception as exc:  # msgspec.ValidationError: not our daemon's report
        raise ValueError(f"not a status report: {exc}") from None


def _folder_report(settings: Settings, daemon: DaemonStatus, note: str) -> StatusReport:
    from genesis_fp16.status.report import NextRun
    from genesis_fp16.status.serving import settings_status

    if settings.enable_fp16_training is False:  # said as the daemon's page says it
        daemon = replace(daemon, rollback=FOLDER_ROLLBACK)
    owner = daemon.owner or ""
    training = owner.split(" ", 1)[1] if owner.startswith("train ") else None  # its agent

    def schedule(agent: str) -> NextRun:
        if agent == training:
            return NextRun(None, f"training now: genesis-fp16 {daemon.owner} (pid {daemon.pid})")
        return NextRun(None, note)

    return settings_status(settings, daemon, schedule)
