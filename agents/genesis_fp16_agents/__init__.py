"""Agent plugins shipped with genesis-fp16, registered through entry points like any other."""
