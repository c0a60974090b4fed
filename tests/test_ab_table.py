"""benchmarks/ab_table.py: the table the in-process A/B benchmarks end with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ab_table.py"


def test_numbers_align_right_and_words_left(capsys: pytest.CaptureFixture[str]) -> None:
    table = load_script(SCRIPT)
    rows = ["| 20,000 | 4,000 | before | 0.247 | 0.122-0.680 | True |", "| 20,000 | 4,000 | this |"]
    header = ["pool", "held out", "tree", "keep + take ms", "min-max", "same"]
    table.print_table("0.5 0.4 0.3", header, rows, note="; CPU ms")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{os.cpu_count()} cores; load average 0.5 0.4 0.3 before, ")
    assert lines[0].endswith(" after; CPU ms")
    assert lines[1] == "| pool | held out | tree | keep + take ms | min-max | same |"
    assert lines[2] == "|---:|---:|---|---:|---|---|"
    assert lines[3:] == rows


def test_a_table_without_rows_still_has_its_rule(capsys: pytest.CaptureFixture[str]) -> None:
    load_script(SCRIPT).print_table("0 0 0", ["pool", "tree"], [])
    assert capsys.readouterr().out.splitlines()[1:3] == ["| pool | tree |", "|---|---|"]
