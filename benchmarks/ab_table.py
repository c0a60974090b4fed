"""The end of an in-process A/B benchmark: the host it ran on and its Markdown table."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


def load_average() -> str:
    """The host's load averages over 1, 5 and 15 minutes, as ``/proc/loadavg`` has them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def print_table(
    load_before: str, header: Sequence[str], rows: Sequence[str], note: str = ""
) -> None:
    """Print the cores, the load average before (``load_before``) and now (``note`` after
    it), then the table: ``header``'s columns, and ``rows``, each a Markdown row. A column
    whose cell in the first row is a number is aligned right, any other left (``rules``).
    """
    rules = alignment(rows[0]) if rows else ["---"] * len(header)
    print(
        f"{os.cpu_count()} cores; load average {load_before} before, {load_average()} after{note}"
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(rules) + "|")
    print("\n".join(rows))


def alignment(row: str) -> list[str]:
    """The rule under each column of a table whose first row is ``row``: numbers right.

    >>> alignment("| 1,000 | main | 0.12-0.31 | 3.5 | True |")
    ['---:', '---', '---', '---:', '---']
    """
    return ["---:" if _number(cell) else "---" for cell in row.strip().strip("|").split("|")]


def _number(cell: str) -> bool:
    try:
        float(cell.strip().replace(",", ""))
    except ValueError:
        return False
    return True
