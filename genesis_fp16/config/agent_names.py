"""Agent names: one pattern, checked once where a name enters the daemon.

An agent's name is a folder under the state folder (``<state>/agents/<name>/``), a metric
label and a settings key, so it is a path that must never leave the state folder nor hold
a separator, a NUL or a newline. Every way in checks it (``check_agent_name``) and refuses
anything else in one line: an entry point's name (genesis_fp16/config/plugins.py: refused,
logged, listed by ``genesis-fp16 agents``), the AGENT argument of every command
(``type=agent_argument``), a ``GENESIS_FP16_AGENTS__<AGENT>__...`` key and the
plugin allowlist (genesis_fp16/config/settings.py), ``new-agent NAME``. The rule is the
agent folder's (``agent_folder.layout``), and ``AgentFolder`` checks it again: no path is
built from a name that was not checked.
"""

from __future__ import annotations

import argparse

from genesis_fp16_infrastructure.api import check_agent_name


def agent_argument(text: str) -> str:
    """argparse's ``type`` of an AGENT argument: a name that is not an agent name
    (``../x``, ``a/b``) is a usage error in one line (exit 2), before anything runs.

    >>> agent_argument("se_darwin")
    'se_darwin'
    """
    try:
        return check_agent_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
