"""The library's contract layer: what a plugin and the daemon exchange.

``plugin_api`` (the names a plugin imports), ``train_request`` (what a run is asked to
do), ``train_result`` (what it reports) and ``result_check`` (a plugin's result checked
field by field). It imports the components below it and names no agent.
"""
