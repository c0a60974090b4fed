"""NaN and infinities across a JSON boundary: they are not JSON, so they travel as null.

A run's report holds NaN honestly (an AUC of one class, a loss with no finite step);
``finite`` turns it into null for ``json.dumps(..., allow_nan=False)``, and ``number``
turns a null float back into NaN on the other side (the torchrun ranks' results, the
``train --json`` object).

>>> finite({"auc": float("nan"), "loss": [1.0, float("inf")]})
{'auc': None, 'loss': [1.0, None]}
>>> number(None)
nan
"""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float, at any depth, replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def number(value: Any) -> float:
    """A float field read back from JSON: null is NaN."""
    return math.nan if value is None else float(value)
