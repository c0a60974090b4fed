"""The library's contract layer: what a plugin and the daemon exchange.

``plugin_api`` (what a plugin is: ``AgentPlugin``, its options, ``ProbeSetup``, the API
version), ``train_request`` (what a run is asked to do, and the agent's state folder as
a job's plan read it, once, which the request carries, and its one read),
``reports`` (what a run reports: its result and the typed records it carries,
one codec: ``record_codec``), ``judging`` (the optional judged-model capability),
``split`` (the held-out split by id hash, which a request's ``ScoreOnly`` and a judged
plugin's losses name). The one call that trains any plugin, ``run_plugin``, lives above
the contract in ``judging/``, which imports it. It imports the components below it and
names no agent.

This package exports nothing: the library imports each name from the module that defines
it, the daemon through ``genesis_fp16_infrastructure.api`` and a plugin through
``genesis_fp16.plugin_api``. Importing the torch-free ``contract.reports`` therefore loads
nothing else of the contract.
"""
