"""What a reader of a lifecycle record's JSON tells apart, shared by the record tests."""

from __future__ import annotations

from typing import Any


def without_nulls(data: Any) -> Any:
    """A JSON value with its objects' null keys left out: what a reader tells apart."""
    if isinstance(data, dict):
        return {k: without_nulls(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [without_nulls(v) for v in data]
    return data
