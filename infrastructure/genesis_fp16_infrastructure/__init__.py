"""The training library, in three layers: the contract (``contract``), the components
(``training``, ``data``, ``world_model``, ``rl``, ``probe``) and the recipes (``recipes``).
The root keeps only utilities.

Imports torch, pydantic and the standard library only.
"""
