"""The world model's retrain recipe: read the trajectory pool, build the task, train a
candidate through ``fit()`` (``run.train``). An agent whose records are trajectories
(SE-Darwin) hands it its ``TrainRequest``; gating and serving are ``judging``'s."""
