"""genesis-fp16."""
