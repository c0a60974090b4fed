"""The library's recipe layer: training procedures wired from the components.

A recipe may name the kind of data it trains on, never an agent. ``retrain`` is the
world-model retrain recipe: read a trajectory pool, train a candidate through ``fit()``,
gate it against the served model, serve, watch and roll back.
"""
