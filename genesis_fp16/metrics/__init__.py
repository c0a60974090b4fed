"""What the daemon records: its Prometheus series, the RL diagnostics' gauges, the HTTP
endpoints that serve them, per-run TensorBoard curves and the last-success store.

Empty on purpose: ``tracking`` and ``last_success`` must not pay for prometheus_client."""
