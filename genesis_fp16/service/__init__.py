"""The long-running service around the runs: the daemon, APScheduler's wiring, systemd's
notifications, Kubeflow's layout, logging, the state folder's lock and its disk errors."""
