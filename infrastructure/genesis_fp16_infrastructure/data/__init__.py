"""Trajectory data: the versioned schema, readers for both record shapes, and a generator."""

from genesis_fp16_infrastructure.data.readers import ReadResult, list_data_files, read_trajectories
from genesis_fp16_infrastructure.data.schema import (
    OUTCOMES,
    SCHEMA_VERSION,
    AttemptInput,
    Example,
    Label,
    ReplayRecord,
    Trajectory,
    TrajectoryPool,
    derive_label,
)
from genesis_fp16_infrastructure.errors import DataError

__all__ = [
    "OUTCOMES",
    "SCHEMA_VERSION",
    "AttemptInput",
    "DataError",
    "Example",
    "Label",
    "ReadResult",
    "ReplayRecord",
    "Trajectory",
    "TrajectoryPool",
    "derive_label",
    "list_data_files",
    "read_trajectories",
]
