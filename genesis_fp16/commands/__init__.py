"""Subcommands of the `genesis-fp16` CLI, one module each."""
