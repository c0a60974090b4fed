"""How the daemon's plugins loaded (genesis_fp16/service/agent_rescan.py): failures,
imports stuck past their deadline, entry-point names refused.

>>> from prometheus_client import CollectorRegistry
>>> plugins = PluginMetrics(Families(CollectorRegistry()))
>>> plugins.plugin_load_stuck.labels(plugin="se_darwin").set(1)
"""

from __future__ import annotations

from genesis_fp16.metrics.metric_names import Families


class PluginMetrics:
    """The plugin-loading series, labelled by ``plugin`` (not ``agent``: a plugin that
    failed to load never became one)."""

    def __init__(self, families: Families) -> None:
        self.plugin_load_failures = families.counter(
            "plugin_load_failures", "Plugins that failed to load or had a wrong API.", ("plugin",)
        )
        self.plugin_load_stuck = families.gauge(
            "plugin_load_stuck",
            "1 while the plugin's import has not returned after its deadline (the daemon "
            "goes on without it); 0 once it returned.",
            ("plugin",),
        )
        self.plugin_names_refused = families.counter(
            "plugin_names_refused",
            "Entry points whose name is not an agent name ([a-z][a-z0-9_]{0,63}: a path, a "
            "separator, a newline): refused and never imported; each name counted once.",
            (),
        )
