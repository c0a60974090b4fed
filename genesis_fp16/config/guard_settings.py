"""The precision guard's settings, ``GENESIS_FP16_GUARD_*``; mixed into ``Settings``.

They are generated from :class:`genesis_fp16_infrastructure.training.GuardConfig`, one
setting ``guard_<field>`` per field, so the guard's fields, defaults and ranges are
declared once, there (see its docstring for what the triggers mean). A setting reads as
the field does, but in the words an environment variable has: an optional trigger's
``None`` (off) is ``0``, and the ladder is a comma-separated list::

    GENESIS_FP16_GUARD_CHECK_INTERVAL=10
    GENESIS_FP16_GUARD_DIVERGENCE_FACTOR=0        # the divergence trigger off
    GENESIS_FP16_GUARD_LADDER=fp16,fp32

Code reads the guard as the typed ``GuardConfig`` (``settings.guard``, built and checked
when the settings are read), never the generated fields; the daemon's own two settings,
``guard_enabled`` and ``guard_promote_after_runs``, are declared here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from genesis_fp16_infrastructure.api import GuardConfig, PrecisionName

# The value types a GuardConfig field may have, and the setting's type for each.
# A ladder of precisions is written as a comma-separated string (GuardConfig checks it).
_SETTING_TYPES: dict[Any, type] = {
    bool: bool,
    int: int,
    float: float,
    tuple[str, ...]: str,
    tuple[PrecisionName, ...]: str,
}


class GuardSwitches(BaseModel):
    """The daemon's own guard settings, and the ``GuardConfig`` the generated ones build."""

    guard_enabled: bool = True
    guard_promote_after_runs: int = Field(default=0, ge=0)
    _guard: GuardConfig = PrivateAttr()  # built once, when the settings are read

    @property
    def guard(self) -> GuardConfig | None:
        """The ``GuardConfig`` every run gets, or None when the guard is turned off.

        >>> from genesis_fp16.config.settings import Settings
        >>> Settings(guard_check_interval=10).guard.check_interval
        10
        """
        return self._guard if self.guard_enabled else None

    @model_validator(mode="after")
    def _check_guard(self) -> Any:
        # At start-up (and on reload): each field was checked by GuardConfig as it was
        # read, so this fails only on a rule across fields that GuardConfig itself holds.
        self._guard = config_from(self, GuardConfig)
        return self


def config_from(settings: BaseModel, config: type[Any]) -> Any:
    """``config`` (a GuardConfig) built from the ``guard_<field>`` settings."""
    values: dict[str, Any] = {}
    for name, (_, kind, optional) in _field_types(config).items():
        values[name] = _field_value(getattr(settings, f"guard_{name}"), kind, optional)
    return config(**values)


def _field_value(value: Any, kind: Any, optional: bool) -> Any:
    """A setting's value as its field takes it: a ladder as a tuple, an optional
    trigger's 0 as None (off)."""
    if kind in (tuple[str, ...], tuple[PrecisionName, ...]):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return None if optional and value == 0 else value


def _field_types(config: type[Any]) -> dict[str, tuple[Any, Any, bool]]:
    """``{field: (its type, X, True)}`` for a field of the dataclass ``config`` typed
    ``X | None``, else ``(its type, its type, False)``; in the fields' order."""
    hints, found = typing.get_type_hints(config), {}
    for item in dataclasses.fields(config):
        hint = hints[item.name]
        args = typing.get_args(hint)
        if isinstance(hint, types.UnionType) and type(None) in args:
            (kind,) = [a for a in args if a is not type(None)]
            found[item.name] = (hint, kind, True)
        else:
            found[item.name] = (hint, hint, False)
    return found


def _setting_value(value: Any) -> Any:
    if value is None:
        return 0
    if isinstance(value, tuple):
        return ",".join(value)
    return value


def settings_model(config: type[GuardConfig]) -> type[GuardSwitches]:
    """The settings of ``config`` (GuardConfig, or a test's larger one): a model with
    :class:`GuardSwitches` and a setting ``guard_<field>`` for each field of the dataclass
    ``config``, in its order, with its default (an optional trigger's off is 0), each
    checked by ``config`` itself as it is read (its range, or 0 for off; the ladder). A
    field whose type has no text form here fails at import, naming it."""
    kinds, defaults = _field_types(config), config()
    fields: dict[str, Any] = {}
    for name, (hint, kind, _) in kinds.items():
        if kind not in _SETTING_TYPES:
            raise TypeError(
                f"GuardConfig.{name}: {hint} has no setting form; "
                f"give it one in {__name__}._SETTING_TYPES"
            )
        fields[f"guard_{name}"] = (_SETTING_TYPES[kind], _setting_value(getattr(defaults, name)))

    def checked_by_config(cls: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
        name = str(info.field_name).removeprefix("guard_")
        _, kind, optional = kinds[name]
        field = _field_value(value, kind, optional)
        try:
            config(**{name: field})
        except ValueError as exc:  # its range, its ladder: the library's words
            off = " (or 0 to turn the trigger off)" if optional else ""
            raise ValueError(f"{exc}{off}") from None
        return ",".join(field) if isinstance(field, tuple) else value

    checked = field_validator(*(f"guard_{name}" for name in kinds))(checked_by_config)
    return create_model(
        f"{config.__name__}Settings",
        __base__=GuardSwitches,
        __doc__="``GENESIS_FP16_GUARD_*``: triggers, ladder, and promotion after clean runs.",
        __validators__={"_checked_by_config": checked},
        **fields,
    )


if TYPE_CHECKING:  # mypy sees the declared switches and the typed ``guard``
    GuardSettings = GuardSwitches
else:
    GuardSettings = settings_model(GuardConfig)
