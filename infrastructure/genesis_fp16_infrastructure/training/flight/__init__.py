"""The numerics flight recorder: fault bundles, their replay, per-layer range statistics."""
