"""The training library: precision policies, loss scaling, trainer, checkpoints, world model, data.

Imports torch, pydantic and the standard library only.
"""
