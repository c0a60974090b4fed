"""What the daemon records: its Prometheus series, the RL diagnostics' gauges, the HTTP
endpoints that serve them and per-run TensorBoard curves.

Empty on purpose: ``tracking`` must not pay for prometheus_client."""
