"""The library's recipe layer: training procedures wired from the components. A recipe
may name the kind of data it trains on, never an agent (``retrain``: the world model's).
"""
