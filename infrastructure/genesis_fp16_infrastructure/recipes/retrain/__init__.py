"""The world model's retrain loop: read the trajectory pool, build the task, train a
candidate through ``fit()``, gate it against the served model and promote or reject it.

An agent whose records are trajectories (``data.schema``) hands its ``TrainRequest`` to
this loop and gets a ``TrainResult`` back; SE-Darwin's plugin is one such agent."""
