"""Library-level RL formulas: PPO arithmetic and precision diagnostics (pure torch)."""
