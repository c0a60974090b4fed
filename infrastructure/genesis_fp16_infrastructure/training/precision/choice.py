"""A measured ``auto``'s choice from its timed rows, and when a kept one may choose again.

Torch-free, so that ``genesis-fp16 precision show`` says what the next run will do by
the rules the run itself follows (``training.run.calibration`` times the rows,
``decide`` turns the choice into the run's precision)::

    >>> from genesis_fp16_infrastructure.training.reports import Measured
    >>> fp32 = Measured("fp32", "eager", 2.0, 1.9, 2.4, 20, p10_ms=1.99, p90_ms=2.21)
    >>> bf16 = Measured("bf16", "eager", 2.49, 2.1, 3.0, 20, p10_ms=2.22, p90_ms=2.75)
    >>> choose([fp32, bf16])[:2]
    ('fp32', 'eager')
    >>> decision_holds([fp32, bf16])  # fp32's 1.99-2.21 clears bf16's 2.22-2.75
    True

- **The choice** (:func:`choose`): the most robust precision within :data:`MARGIN` of the
  fastest row, in its faster execution.
- **Only the request's candidates** (:func:`among`): a kept row of a precision this run
  would not time (an fp16 row on a CPU without native fp16) is never read.
- **Load, judged on the decision** (:func:`reuse_refused`): a spread past
  :data:`LOAD_BOUND` says the host was busy, but a measurement whose choice holds at every
  end of its rows' p10-p90 decided all the same, and is kept; only one whose choice the
  noise could have flipped is timed again at the next run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from genesis_fp16_infrastructure.precision_names import PRECISIONS, PrecisionName


class Measured(Protocol):
    """A timed row as the rules read it: ``training.reports.Measured``, which imports this
    module for its rules (so it is named here by its shape, not imported)."""

    @property
    def precision(self) -> PrecisionName: ...
    @property
    def execution(self) -> str: ...
    @property
    def median_ms(self) -> float: ...
    @property
    def p10_ms(self) -> float: ...
    @property
    def p90_ms(self) -> float: ...
    @property
    def steps(self) -> int: ...
    @property
    def samples(self) -> int: ...
    @property
    def spread(self) -> float: ...
    def describe(self) -> str: ...


Row = TypeVar("Row", bound=Measured)

MARGIN = 0.05
"""A measured ``auto`` prefers a more robust precision whose step is this close to the fastest."""

REVALIDATE = 0.10
"""A reused winner's live median must be this close to the kept one."""

LOAD_BOUND = 1.5
"""A row whose p90 step is more than this times its p10 step was timed under load.

The same step on the same batches repeats closely on a quiet host (figures in
``docs/daemon.md``, "auto"), while ``auto`` picks between medians that differ by
``MARGIN`` (5%). A spread of 1.5 is ten times that: other work took the CPU or GPU
during the timed steps. Whether that matters is the decision's to say
(:func:`reuse_refused`): a winner whose p90 still beats the others' p10 won all the same.
Only the timed samples count (steady-state steps or replays, never a warm-up or a
capture), and only a row with at least :data:`LOAD_SAMPLES` of them."""

LOAD_SAMPLES = 4
"""The fewest samples whose p10 and p90 say anything about load: a row with fewer is
never called loaded (its spread is still reported)."""


def choose(rows: Iterable[Measured], margin: float = MARGIN) -> tuple[PrecisionName, str, str]:
    """The most robust precision within ``margin`` of the fastest row, in its faster
    execution: (precision, execution, why). Rows are (precision, execution) timings."""
    rows = list(rows)
    chosen = _pick(rows, margin)
    fastest = min(rows, key=lambda r: r.median_ms)
    fp32 = [r for r in rows if r.precision == "fp32"]  # the reference: eager, else its only row
    base = next((r for r in fp32 if r.execution == "eager"), fp32[0] if fp32 else None)
    if base is None:
        raise ValueError("precision calibration: fp32 was not timed")
    why = (
        f"auto -> {chosen.precision}, {chosen.execution}: measured "
        f"{base.median_ms / chosen.median_ms:.2f}x fp32 {base.execution} "
        f"(median {chosen.median_ms:.3f} ms against {base.median_ms:.3f} ms)"
    )
    other = [r for r in rows if r.precision == chosen.precision and r is not chosen]
    if other:
        why += f"; {chosen.precision} {other[0].execution} {other[0].median_ms:.3f} ms"
    if fastest.precision != chosen.precision:
        why += (
            f"; {fastest.precision} was {chosen.median_ms / fastest.median_ms:.2f}x faster, "
            f"within the {margin:.0%} margin that prefers the more robust precision"
        )
    # Every row, the precisions not chosen included: what the choice was made against.
    why += "; timed, median (p10-p90): " + ", ".join(r.describe() for r in rows)
    loaded = under_load(rows)
    if loaded is not None and decision_holds(rows, margin):
        why += f"; {loaded}, but the choice holds across every row's p10-p90: kept"
    elif loaded is not None:
        why += f"; {loaded}: not reused, measured again at the next run"
    return chosen.precision, chosen.execution, why


def _pick(
    rows: Sequence[Row], margin: float, ms: Callable[[Row], float] = lambda r: r.median_ms
) -> Row:
    """The row :func:`choose` picks, each row taken at ``ms`` (its median)."""
    fastest = min(map(ms, rows))
    near = {r.precision for r in rows if ms(r) <= fastest * (1 + margin)}
    precision = next(name for name in PRECISIONS if name in near)
    return min((r for r in rows if r.precision == precision), key=ms)


def among(rows: Iterable[Row], candidates: Iterable[str]) -> tuple[Row, ...]:
    """The rows of ``candidates`` only: what a request that times those may read.

    >>> from genesis_fp16_infrastructure.training.reports import Measured
    >>> planted = Measured("fp16", "eager", 0.02, 0.02, 0.02, 20)
    >>> among([planted], ["fp32", "bf16"])
    ()
    """
    names = set(candidates)
    return tuple(r for r in rows if r.precision in names)


def decision_holds(rows: Sequence[Measured], margin: float = MARGIN) -> bool:
    """Whether :func:`choose`'s pick stands at every end of the rows' intervals: with the
    chosen row at its p90 and every other row at its p10, the same row is chosen. For two
    rows and a fastest winner, its interval clears the runner-up's. A row with no known
    spread counts at its median."""
    if not rows:
        return False
    chosen = _pick(rows, margin)

    def worst(row: Measured) -> float:
        if row.p10_ms <= 0:  # spread not known (a row made by hand): its median
            return row.median_ms
        return row.p90_ms if row is chosen else row.p10_ms

    return _pick(rows, margin, worst) is chosen


def under_load(rows: Iterable[Measured]) -> str | None:
    """Why a calibration's ``rows`` were timed under load (:data:`LOAD_BOUND`), naming
    each row past it; None when every row is steady (or its spread unknown).

    >>> from genesis_fp16_infrastructure.training.reports import Measured
    >>> row = Measured("bf16", "eager", 35.2, 33.0, 60.0, 10, p10_ms=33.0, p90_ms=55.0)
    >>> under_load([row])
    'taken under load (bf16 eager p90/p10 1.67 > 1.5)'
    """
    loaded = [r for r in rows if (r.samples or r.steps) >= LOAD_SAMPLES and r.spread > LOAD_BOUND]
    if not loaded:
        return None
    named = ", ".join(f"{r.precision} {r.execution} p90/p10 {r.spread:.2f}" for r in loaded)
    return f"taken under load ({named} > {LOAD_BOUND:g})"


def reuse_refused(rows: Sequence[Measured], margin: float = MARGIN) -> str | None:
    """Why a measurement of ``rows`` may not be reused for its load, or None: only one
    taken under load whose choice does not hold across its rows' p10-p90
    (:func:`decision_holds`); a clear decision is kept whatever its spread.

    >>> from genesis_fp16_infrastructure.training.reports import Measured
    >>> fp32 = Measured("fp32", "eager", 2.0, 1.9, 4.0, 20, p10_ms=1.99, p90_ms=3.4)
    >>> bf16 = Measured("bf16", "eager", 2.49, 2.1, 3.0, 20, p10_ms=2.22, p90_ms=2.75)
    >>> reuse_refused([fp32, bf16])[:44]  # fp32's p90 3.4 against bf16's p10 2.22
    'taken under load (fp32 eager p90/p10 1.71 > '
    >>> from dataclasses import replace
    >>> print(reuse_refused([replace(fp32, p10_ms=1.29, p90_ms=2.21), bf16]))  # 1.71, clear
    None

    """
    loaded = under_load(rows)
    if loaded is None or decision_holds(rows, margin):
        return None
    return f"{loaded}, and the choice does not hold across its rows' p10-p90"
