"""The SE-Darwin agent, registered as ``se_darwin`` in the ``genesis_fp16.agents`` group."""

from genesis_fp16_agents.se_darwin.plugin import SEDarwinPlugin

plugin = SEDarwinPlugin()

__all__ = ["SEDarwinPlugin", "plugin"]
