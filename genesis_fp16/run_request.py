"""One run's request, worked out in one place: the agent's options (and, below, the rest).

Options come from the settings (``GENESIS_FP16_AGENTS__<AGENT>__OPTIONS__<KEY>=VALUE``)
and, for ``genesis-fp16 train``, from ``--option KEY=VALUE`` on top. Both are checked
against the options the plugin declares before anything trains::

    >>> resolve_options("rlhf_ppo", plugin, {"preset": "bf16_fp32_kl"})  # doctest: +SKIP
    {'preset': 'bf16_fp32_kl'}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from genesis_fp16.settings import AGENT_VARIABLE_PREFIX, Settings, SettingsError
from infrastructure.plugin_api import (
    OptionValue,
    TrainRequestError,
    declared_options,
    parse_options,
)


def option_variable(agent: str, key: str) -> str:
    """``GENESIS_FP16_AGENTS__<AGENT>__OPTIONS__<KEY>``."""
    return f"{AGENT_VARIABLE_PREFIX}{agent.upper()}__OPTIONS__{key.upper()}"


def parse_option_flags(flags: Iterable[str]) -> dict[str, str]:
    """``["preset=bf16_fp32_kl", ...]`` from ``--option`` as ``{key: text}``."""
    out: dict[str, str] = {}
    for flag in flags:
        key, sep, value = flag.partition("=")
        if not sep or not key.strip():
            raise TrainRequestError(f"--option {flag!r}: expected KEY=VALUE, e.g. preset=bf16_pure")
        out[key.strip().lower()] = value.strip()
    return out


def resolve_options(
    agent: str,
    plugin: object,
    configured: Mapping[str, Any],
    flags: Mapping[str, str] | None = None,
) -> dict[str, OptionValue]:
    """The typed options of one run: ``configured`` (settings), then ``flags`` (CLI) on top.

    Raises :class:`TrainRequestError`, one line naming the setting or flag, the agent,
    the option and what is valid.
    """
    declared = declared_options(plugin)
    out: dict[str, OptionValue] = {}
    for origin, given in (("settings", configured), ("flags", flags or {})):
        for key, value in given.items():
            try:
                out.update(parse_options(agent, declared, {key: value}))
            except TrainRequestError as exc:
                where = (
                    f"--option {key}={value}" if origin == "flags" else option_variable(agent, key)
                )
                raise TrainRequestError(f"{where}: {exc}") from None
    return out


def check_configured_options(settings: Settings, plugins: Mapping[str, object]) -> None:
    """Every configured option of every loaded agent, checked; :class:`SettingsError` if bad.

    The daemon calls it at start-up and on each reload, so that a bad option is a start-up
    error or a failed reload, never a failed run.
    """
    errors = []
    for agent, plugin in plugins.items():
        try:
            resolve_options(agent, plugin, settings.agent(agent).options)
        except TrainRequestError as exc:
            errors.append(str(exc))
    if errors:
        raise SettingsError(errors)
