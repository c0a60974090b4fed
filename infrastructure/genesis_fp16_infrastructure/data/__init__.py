"""Trajectory data: the versioned schema, readers for both record shapes, and a generator."""
