"""The ranges of a config's numeric fields, declared once, on the field: :func:`bounded`
puts a field's :class:`Bounds` in its metadata, and a :class:`Bounded` config refuses a
value outside one in a line naming the setting, the field, the value and the range. The
daemon's settings read the same ranges (``Bounded.bounds()``), so a range is written once.
A small tool with no knowledge of training::

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Window(Bounded):
    ...     SETTING = "window"
    ...     steps: int = bounded(10, ge=1)
    >>> Window(steps=0)
    Traceback (most recent call last):
    ...
    ValueError: invalid window setting: steps=0 must be >= 1
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class Bounds:
    """The range a numeric config field must lie in (None: no bound on that side); the
    daemon's settings read a guard field's too, so a range is declared once, on the field."""

    ge: float | None = None
    gt: float | None = None
    lt: float | None = None

    def hold(self, value: float) -> bool:
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.lt is None or value < self.lt)
        )

    def describe(self) -> str:
        """``>= 1``, ``> 0 and < 1``: the range as the error messages say it."""
        parts = [(">=", self.ge), (">", self.gt), ("<", self.lt)]
        return " and ".join(f"{sign} {bound:g}" for sign, bound in parts if bound is not None)


def bounded(
    default: Any, *, ge: float | None = None, gt: float | None = None, lt: float | None = None
) -> Any:
    """A dataclass field with its :class:`Bounds` in the field's metadata."""
    return field(default=default, metadata={"bounds": Bounds(ge, gt, lt)})


class Bounded:
    """A frozen dataclass whose numeric fields declare their ranges (:func:`bounded`): a
    value outside one (None is not checked) is refused in one line naming the config
    (``SETTING``), the field, the value and the range."""

    SETTING: ClassVar[str]

    @classmethod
    def bounds(cls) -> dict[str, Bounds]:
        """The :class:`Bounds` of each of the config's fields that has one, by field name
        (a subclass's added fields too): the daemon's settings take their ranges here."""
        found = {item.name: item.metadata.get("bounds") for item in fields(cls)}  # type: ignore[arg-type]
        return {name: limits for name, limits in found.items() if isinstance(limits, Bounds)}

    def __post_init__(self) -> None:
        for name, limits in self.bounds().items():
            value = getattr(self, name)
            if value is not None and not limits.hold(value):
                raise ValueError(
                    f"invalid {self.SETTING} setting: {name}={value!r} must be {limits.describe()}"
                )
