"""Records' ``created_at`` as seconds since the epoch, a column at a time.

``schema.created_seconds`` reads one value (``datetime.fromisoformat``, a naive time as
UTC): about 1 µs a record, 25 ms of a 25,000-record read (issue 90). A batch's times
nearly always share one layout, ``YYYY-MM-DDTHH:MM:SS`` with ``+HH:MM``, ``-HH:MM``,
``Z`` or nothing after it: those are read here with numpy, every digit and separator
checked and every field in range (the month's days, leap years), the same seconds as
``created_seconds`` to the bit (whole seconds: the exact quotient its division rounds is
a whole number). Anything else (a fraction of a second, another separator, a day that
does not exist, a number, None) is read by ``created_seconds``, a value at a time
(``tests/infrastructure/data/test_created_times.py`` holds the two to each other).

>>> created_column(["2025-01-06T09:00:00+00:00", None, 3.5, "yesterday"]).tolist()
[1736154000.0, nan, 3.5, nan]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from genesis_fp16_infrastructure.data.schema import created_seconds

# A layout's length, and where its offset's sign is (None: none, or Z)
_LAYOUTS = {19: None, 20: None, 25: 19}
_DIGITS = (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18)
_MARKS = {4: "-", 7: "-", 10: "T", 13: ":", 16: ":"}
_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)


def created_column(values: Sequence[str | float | None]) -> np.ndarray:
    """Each value's ``created_seconds`` as float64, nan where it is None."""
    out = np.full(len(values), np.nan)
    texts = [at for at, value in enumerate(values) if value.__class__ is str]
    parsed = _parsed([values[at] for at in texts]) if texts else None  # type: ignore[misc]
    if parsed is not None:
        seconds, good = parsed
        out[np.array(texts)[good]] = seconds[good]
        rest = [at for at, ok in zip(texts, good.tolist(), strict=True) if not ok]
    else:
        rest = texts
    if len(texts) < len(values):
        rest += [at for at, value in enumerate(values) if value.__class__ is not str]
    for at in rest:
        seconds_or_none = created_seconds(values[at])
        if seconds_or_none is not None:
            out[at] = seconds_or_none
    return out


def _parsed(texts: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """Whole seconds since the epoch of each text, and whether the text is of one of the
    layouts with every field in range; None unless every text is ASCII of one length
    that is a layout's."""
    size = len(texts[0])
    joined = "".join(texts)
    if size not in _LAYOUTS or len(joined) != size * len(texts) or not joined.isascii():
        return None
    chars = np.frombuffer(joined.encode("ascii"), np.uint8).reshape(len(texts), size)
    digit = chars.astype(np.int64) - ord("0")
    good = ((digit[:, _DIGITS] >= 0) & (digit[:, _DIGITS] <= 9)).all(axis=1)
    for at, mark in _MARKS.items():
        good &= chars[:, at] == ord(mark)

    def number(start: int, width: int) -> np.ndarray:
        value = np.zeros(len(texts), np.int64)
        for at in range(start, start + width):
            value = value * 10 + digit[:, at]
        return value

    year, month, day = number(0, 4), number(5, 2), number(8, 2)
    hour, minute, second = number(11, 2), number(14, 2), number(17, 2)
    offset = np.zeros(len(texts), np.int64)
    if size == 20:
        good &= chars[:, 19] == ord("Z")
    sign_at = _LAYOUTS[size]
    if sign_at is not None:
        sign = chars[:, sign_at]
        good &= ((sign == ord("+")) | (sign == ord("-"))) & (chars[:, sign_at + 3] == ord(":"))
        for at in (sign_at + 1, sign_at + 2, sign_at + 4, sign_at + 5):
            good &= (digit[:, at] >= 0) & (digit[:, at] <= 9)
        off_hours, off_minutes = number(sign_at + 1, 2), number(sign_at + 4, 2)
        good &= (off_hours < 24) & (off_minutes < 60)
        offset = np.where(sign == ord("-"), -1, 1) * (off_hours * 3600 + off_minutes * 60)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    days_in = _MONTH_DAYS[np.clip(month, 0, 12)] + ((month == 2) & leap)
    good &= (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= days_in)
    good &= (hour < 24) & (minute < 60) & (second < 60)
    # Days from 1970-01-01 to the date (H. Hinnant's days_from_civil), years from March
    y = year - (month <= 2)
    era = y // 400
    of_era = y - era * 400
    day_of_year = (153 * np.where(month > 2, month - 3, month + 9) + 2) // 5 + day - 1
    day_of_era = of_era * 365 + of_era // 4 - of_era // 100 + day_of_year
    days = era * 146097 + day_of_era - 719468
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset
    return seconds.astype(np.float64), good
