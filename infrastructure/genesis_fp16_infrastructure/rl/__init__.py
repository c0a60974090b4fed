"""Library-level RL components (pure torch): PPO arithmetic and rollouts, a tiny causal
transformer, the guard's PPO config, per-component precision presets and diagnostics."""
