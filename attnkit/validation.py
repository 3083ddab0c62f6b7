"""The one validator of every config dataclass: model configs and run-config sections.

A config is a dataclass whose fields are plain data (``int``, ``float``,
``str``, ``bool``, ``None``, tuples and lists of them, ``Literal`` choices).
Three functions cover what every config needs:

* ``from_mapping(cls, data, prefix)``: build ``cls`` from a mapping (YAML,
  JSON); an unknown key is named with the closest known one
  (``train.max_step: unknown key; did you mean 'train.max_steps'?``);
* ``check_fields(config)``: called from ``__post_init__``, checks every
  field's value against its annotation (``d_model: expected int, got str 'x'``;
  a ``Literal`` lists its choices; a list or tuple says the length it wants or
  names the item at fault: ``train.betas: expected 2 values (float, float) or
  null, got 3 values [...]``, ``train.betas[1]: expected float, got str 'x'``);
* small range helpers (``at_least``, ``in_range``, ``require``) whose messages
  start with the field name.

Errors are ``ConfigError`` (a ``ValueError``) whose message starts with the
field's name; ``from_mapping`` prefixes the section (``model.``, ``train.``).
``bool`` is an ``int`` subclass in Python, but ``d_model: true`` is a
mistake, so a bool passes only where ``bool`` is asked for; ints pass as floats.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeVar

from attnkit.errors import ConfigError

C = TypeVar("C")
INT_LIMIT = 1 << 63


_HINTS: dict[type, dict[str, object]] = {}


def _hints(cls: type) -> dict[str, object]:
    """Resolved field annotations (``from __future__ import annotations`` makes them strings)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _describe(annotation: object) -> str:
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    origin = typing.get_origin(annotation)
    if origin in (tuple, list) or annotation in (tuple, list):
        args = typing.get_args(annotation)
        if origin is tuple and args and args[-1] is not Ellipsis:  # tuple[float, float]
            return f"{len(args)} values ({', '.join(_describe(a) for a in args)})"
        return f"a list of {_describe(args[0])}" if args else "a list"
    return getattr(origin or annotation, "__name__", str(annotation))


def _item_problem(name: str, value: object, annotation: object) -> str | None:
    """Why a list or tuple ``value`` does not fit a list or tuple ``annotation`` (or one
    in a union): its length, or the first item that does not fit (named ``name[i]``)."""
    if not isinstance(value, list | tuple):
        return None
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    for option in typing.get_args(annotation) if union else (annotation,):
        origin, args = typing.get_origin(option), typing.get_args(option)
        if origin not in (tuple, list) or not args:
            continue
        if origin is tuple and args[-1] is not Ellipsis:
            if len(value) != len(args):
                return (
                    f"{name}: expected {_describe(annotation)}, "
                    f"got {len(value)} value{'s' * (len(value) != 1)} {list(value)!r}"
                )
            wanted = args
        else:
            wanted = (args[0],) * len(value)
        for i, (item, want) in enumerate(zip(value, wanted)):
            if not type_ok(item, want):
                try:
                    check_value(f"{name}[{i}]", item, want)
                except ConfigError as e:
                    return str(e)
    return None


def type_ok(value: object, annotation: object) -> bool:
    """Whether ``value`` fits ``annotation`` (the subset of typing configs use)."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, a) for a in typing.get_args(annotation))
    if origin is Literal:
        return value in typing.get_args(annotation) and not isinstance(value, bool)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (tuple, list):
        container = tuple if origin is tuple else list
        # YAML and JSON have only lists: a list stands in for a tuple.
        if not isinstance(value, container | list):
            return False
        args = typing.get_args(annotation)
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(type_ok, value, args))
        return all(type_ok(v, args[0]) for v in value) if args else True
    if origin is dict or annotation is dict:
        return isinstance(value, dict)
    return isinstance(value, annotation) if isinstance(annotation, type) else True


def _out_of_range(value: object) -> str | None:
    """Why a number that fits its annotation still cannot be used, or ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not -INT_LIMIT <= value < INT_LIMIT
    ):
        return f"must be below 2**63 in size (PyTorch counts are int64), got {value}"
    if isinstance(value, list | tuple):
        return next((r for r in map(_out_of_range, value) if r), None)
    return None


def check_value(name: str, value: object, annotation: object) -> None:
    """Raise ``ConfigError`` naming ``name`` unless ``value`` fits ``annotation``.

    Numbers must also be usable: no NaN or infinity (``lr: .inf`` would pass
    every ``> 0`` check), no int beyond int64 (PyTorch would overflow).
    """
    if type_ok(value, annotation):
        problem = _out_of_range(value)
        if problem:
            raise ConfigError(f"{name}: {problem}")
        return
    if typing.get_origin(annotation) is Literal:
        raise ConfigError(f"{name}: expected {_describe(annotation)}; got {value!r}")
    problem = _item_problem(name, value, annotation)
    if problem:
        raise ConfigError(problem)
    raise ConfigError(
        f"{name}: expected {_describe(annotation)}, got {type(value).__name__} {value!r}"
    )


def check_fields(config: Any) -> None:
    """Check every field of dataclass instance ``config`` against its annotation."""
    hints = _hints(type(config))
    for f in dataclasses.fields(config):
        check_value(f.name, getattr(config, f.name), hints[f.name])


def choices(annotation: object) -> tuple[Any, ...]:
    """The values of a ``Literal`` annotation (for help texts and other checks)."""
    return typing.get_args(annotation)


def from_mapping(cls: type[C], data: object, prefix: str = "") -> C:
    """Build dataclass ``cls`` from ``data`` (a mapping or ``None``), naming ``prefix.key``.

    Unknown keys are refused with the nearest known one; values are checked
    by the class's own ``__post_init__`` (which calls ``check_fields``); any
    ``ConfigError`` it raises is prefixed with ``prefix.``.
    """
    where = f"{prefix}." if prefix else ""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(data).__name__}")
    known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    for key in data:
        if key not in known:
            raise ConfigError(f"{where}{key}: unknown key{suggest(str(key), known, where)}")
    hints = _hints(cls)
    values = {}
    for key, value in data.items():
        annotation = hints[key]
        # A list from YAML/JSON where the field is a tuple comes back as a tuple.
        if typing.get_origin(annotation) is tuple and isinstance(value, list):
            value = tuple(value)
        values[key] = value
    try:
        return cls(**values)
    except ConfigError as e:
        raise ConfigError(f"{where}{e}") from None


def suggest(key: str, known: Iterable[str], prefix: str = "") -> str:
    """``"; did you mean 'prefix.close'?"`` for the closest known name, or ``""``."""
    hint = difflib.get_close_matches(key, list(known), n=1)
    return f"; did you mean '{prefix}{hint[0]}'?" if hint else ""


# -- range helpers: messages start with the field name ---------------------------------


def require(name: str, ok: bool, message: str) -> None:
    """Raise ``ConfigError("name: message")`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{name}: {message}")


def at_least(config: object, names: Iterable[str], minimum: int | float) -> None:
    """Every field in ``names`` is ``>= minimum``."""
    for name in names:
        value = getattr(config, name)
        require(name, value >= minimum, f"must be >= {minimum}, got {value}")


def in_range(
    name: str, value: float, low: float, high: float, *, closed_high: bool = False
) -> None:
    """``low <= value < high`` (``<= high`` with ``closed_high``)."""
    ok = low <= value <= high if closed_high else low <= value < high
    bracket = "]" if closed_high else ")"
    require(name, ok, f"must be in [{low:g}, {high:g}{bracket}, got {value}")
