"""The edits the drift tests make to a generated pool's newest records: each named case
moves one feature (or the labels) the way a real change in the agents' data would."""

from __future__ import annotations

from typing import Any


def edit_record(name: str, record: dict[str, Any], n: int) -> None:
    """Edit ``record`` (the ``n``-th new one) as case ``name`` says; any other name (such
    as ``"none"``) leaves it as generated."""
    if name == "generation_x10":
        record["generation"] = 10 * record["generation"]
    elif name == "agent_qa":
        record["agent_name"] = "qa"
    elif name == "rename_grep":
        record["tools_used"] = ["ripgrep" if t == "grep" else t for t in record["tools_used"]]
    elif name == "success_up" and "success_score" in record:
        record["success_score"] = 0.9 if n % 5 < 3 else 0.1
