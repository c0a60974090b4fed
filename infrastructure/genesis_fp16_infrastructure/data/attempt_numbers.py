"""What an attempt's own record says in numbers: its change, files, words and tools.

These are the encoder's numeric features that need nothing but the record itself (the
rest, its lineage, need the pool). They cost most of a record's encoding, a few
microseconds of string work each, and never change while the record does not, so the
reader works them out once per record and the record cache keeps them beside it
(packed float64, :func:`pack`): a pool that grows by 1% computes them for that 1%.

``OWN_FEATURES`` names them in the order :func:`own_numbers` returns them; the encoder
(``world_model.features``) places them among its ``NUMERIC_FEATURES``.

>>> own_numbers(AttemptInput(code_changes="@@ -1 +1 @@\\n+ a\\n- b"))[:3]
(0.0, 0.0, 1.3862943611198906)
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence

from genesis_fp16_infrastructure.data.schema import AttemptInput

# Bump when a value below changes: cached numbers of another version are worked out again.
NUMBERS_VERSION = 1
OWN_FEATURES: tuple[str, ...] = (
    "log_generation",
    "parents",
    "log_change_lines",
    "log_change_chars",
    "log_modified_files",
    "log_strategy_words",
    "log_diagnosis_words",
    "tools",
    "added_share",
    "log_hunks",
    "log_distinct_files",
    "touches_tests",
    "touches_config",
    "touches_docs",
    "touches_code",
)
_PACKED = struct.Struct(f"<{len(OWN_FEATURES)}d")
_TEST_MARKS = ("test_", "tests/", "_test.", "/test/", "conftest")
_CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".ini", ".cfg", ".json", ".env")
_DOCS_SUFFIXES = (".md", ".rst", ".txt")
# str.splitlines also ends a line at these (and at three characters outside ASCII); a
# diff holding none of them (nearly every one) has its lines counted by str.count instead
# of split one by one. Looked for one by one with `in`: a regex's character class took
# 2.5 µs a 400-character diff, half of the numbers' cost (tests/infrastructure/data/
# test_attempt_numbers.py holds the counts to the line-by-line ones).
_OTHER_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def own_numbers(attempt: AttemptInput) -> tuple[float, ...]:
    """The attempt's ``OWN_FEATURES``, in that order."""
    diff = attempt.code_changes
    lines = diff.count("\n") + 1 if diff else 0
    added_share, hunks = change_shape(diff)
    return (
        math.log1p(attempt.generation),
        float(len(attempt.parent_ids)),
        math.log1p(lines),
        math.log1p(len(diff)),
        math.log1p(len(attempt.modified_files)),
        math.log1p(len(attempt.proposed_strategy.split())),
        math.log1p(len(attempt.problem_diagnosis.split())),
        float(len(set(attempt.tools_used))),
        added_share,
        math.log1p(hunks),
        math.log1p(len(set(attempt.modified_files))),
        *file_kinds(attempt.modified_files),
    )


def pack(numbers: Sequence[float]) -> bytes:
    """``own_numbers`` as little-endian float64 bytes (120 bytes; a tuple of floats held
    per record costs five times that)."""
    return _PACKED.pack(*numbers)


def change_shape(diff: str) -> tuple[float, float]:
    """(share of added among added and removed lines, 0.5 when neither; number of hunks).

    A line starting ``@@`` opens a hunk; ``+`` (not ``+++``) is added, ``-`` (not
    ``---``) removed. Counted with ``str.count`` on the line starts when the diff's only
    line break is ``\\n`` (the same counts, without a Python loop over its lines)."""
    if diff.isascii() and _only_newlines(diff):
        text = "\n" + diff
        hunks = text.count("\n@@")
        added = text.count("\n+") - text.count("\n+++")
        removed = text.count("\n-") - text.count("\n---")
    else:
        added = removed = hunks = 0
        for line in diff.splitlines():
            if line.startswith("@@"):
                hunks += 1
            elif line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
    share = added / (added + removed) if added + removed else 0.5
    return share, float(hunks)


def _only_newlines(text: str) -> bool:
    """Whether ``text`` holds none of ``_OTHER_BREAKS``."""
    r, vt, ff, fs, gs, rs = _OTHER_BREAKS
    return not (r in text or vt in text or ff in text or fs in text or gs in text or rs in text)


def file_kinds(files: Sequence[str]) -> tuple[float, float, float, float]:
    """Whether the change touches tests, configuration, docs, other code (1.0 or 0.0)."""
    kinds = {_kind(name) for name in files}
    return tuple(float(k in kinds) for k in ("test", "config", "docs", "code"))  # type: ignore[return-value]


@functools.lru_cache(maxsize=2**16)  # a repository's files recur across its attempts
def _kind(name: str) -> str:
    lower = name.lower()
    if any(mark in lower for mark in _TEST_MARKS):
        return "test"
    if lower.endswith(_CONFIG_SUFFIXES):
        return "config"
    if lower.endswith(_DOCS_SUFFIXES):
        return "docs"
    return "code"
