"""The library's contract layer: what a plugin and the daemon exchange.

``plugin_api`` (the names a plugin imports), ``train_request`` (what a run is asked to
do), ``agent_snapshot`` (the agent's state folder as a job's plan read it, once, which
the request carries), ``train_result`` (what it reports) and ``result_check`` (a
plugin's result checked field by field). It imports the components below it and names
no agent; the snapshot's served-model pointer is still the retrain recipe's
``ServedPointer`` until the agent folder's owner holds that record.
"""
