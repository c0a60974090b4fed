"""Agent names: one pattern, checked once where a name enters the daemon.

An agent's name is a folder under the state folder (``<state>/agents/<name>/``), a metric
label and a settings key, so it is a path that must never leave the state folder nor hold
a separator, a NUL or a newline. Every way in checks it here and refuses anything else in
one line: an entry point's name (genesis_fp16/config/plugins.py: refused, logged, listed
by ``genesis-fp16 agents``), the AGENT argument of every command
(genesis_fp16/commands/named_agent.py), a ``GENESIS_FP16_AGENTS__<AGENT>__...`` key and the
plugin allowlist (genesis_fp16/config/settings.py), ``new-agent NAME``. ``AgentPaths``
checks it again: no path is built from a name that was not checked.

>>> check_agent_name("se_darwin")
'se_darwin'
>>> check_agent_name("../escape")
Traceback (most recent call last):
...
ValueError: agent name '../escape' is not valid: use [a-z][a-z0-9_]{0,63} (...)
"""

from __future__ import annotations

import re

AGENT_NAME_PATTERN = "[a-z][a-z0-9_]{0,63}"
_AGENT_NAME = re.compile(AGENT_NAME_PATTERN)
# A refused name is shown cut: a 300-character one need not fill the line.
_SHOWN_CHARS = 80


def is_agent_name(name: object) -> bool:
    """Whether ``name`` is an agent name (a ``str`` matching the pattern in full)."""
    return isinstance(name, str) and _AGENT_NAME.fullmatch(name) is not None


def check_agent_name(name: object) -> str:
    """``name`` when it is an agent name; a one-line :class:`ValueError` naming it otherwise."""
    if is_agent_name(name):
        return str(name)
    raise ValueError(
        f"agent name {shown_name(name)} is not valid: use {AGENT_NAME_PATTERN} (a lower-case "
        "letter, then up to 63 lower-case letters, digits and _)"
    )


def shown_name(name: object) -> str:
    """``name`` quoted for one line of text (its newlines escaped), cut when long.

    >>> print(shown_name("a\\nb"), shown_name("x" * 300)[-20:])
    'a\\nb' ... (300 characters)
    """
    text = repr(name)
    if len(text) <= _SHOWN_CHARS:
        return text
    size = f" ({len(name)} characters)" if isinstance(name, str) else ""
    return f"{text[:_SHOWN_CHARS]}...{size}"
