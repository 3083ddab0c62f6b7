"""Strict JSON out: every JSON attnkit writes or prints goes through ``dumps``/``dump``.

Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity`` by default,
which no other JSON parser accepts (RFC 8259 has no such literals): a
training summary whose validation loss was NaN printed ``"loss": NaN`` and
broke ``jq`` and every reader in another language. Here a non-finite float
becomes ``null``, and the object holding it gets a ``"nonfinite"`` key naming
what each such value was (``{"loss": null, "nonfinite": {"loss": "NaN"}}``),
so the reason is not lost; in a list the ``null`` stands alone. The result is
then encoded with ``allow_nan=False``, so a value that slipped past the
replacement (a float subclass with its own ``__repr__``) is an error here
rather than invalid JSON on disk.

The keywords are ``json.dumps``'s, unchanged: a tree without
non-finite values is encoded byte for byte as ``json.dumps`` would, so
digests computed over ``dumps`` output (``sort_keys=True``) do not change.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import IO, Any, NoReturn, TypeAlias

NONFINITE_KEY = "nonfinite"

# A JSON value as ``json.loads`` returns it; readers narrow it with ``isinstance``.
JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None
JSONObject: TypeAlias = dict[str, JSON]


def _name(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    return "Infinity" if x > 0 else "-Infinity"


def finite_tree(obj: object) -> object:
    """``obj`` with every non-finite float replaced by ``None`` (see the module doc).

    Dicts, lists and tuples are copied where they hold a non-finite value and
    returned as they are otherwise; other values pass through untouched.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        out: dict[object, object] = {}
        reasons: dict[str, str] = {}
        changed = False
        for key, value in obj.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key], reasons[str(key)] = None, _name(value)
                changed = True
                continue
            new = finite_tree(value)
            changed = changed or new is not value
            out[key] = new
        if not changed:
            return obj
        if reasons:
            previous = out.get(NONFINITE_KEY)
            merged = dict(previous) if isinstance(previous, dict) else {}
            merged.update(reasons)
            out[NONFINITE_KEY] = merged
        return out
    if isinstance(obj, (list, tuple)):
        items = [finite_tree(v) for v in obj]
        if all(new is old for new, old in zip(items, obj)):
            return obj
        return items
    return obj


def dumps(
    obj: object,
    *,
    indent: int | None = None,
    sort_keys: bool = False,
    ensure_ascii: bool = True,
    separators: tuple[str, str] | None = None,
    default: Callable[[Any], object] | None = None,  # json's hook: any unencodable value
) -> str:
    """``json.dumps(obj, ...)`` as strict JSON: non-finite floats as ``null``."""
    return json.dumps(
        finite_tree(obj),
        allow_nan=False,
        indent=indent,
        sort_keys=sort_keys,
        ensure_ascii=ensure_ascii,
        separators=separators,
        default=default,
    )


def dump(
    obj: object,
    fp: IO[str],
    *,
    indent: int | None = None,
    sort_keys: bool = False,
    ensure_ascii: bool = True,
    separators: tuple[str, str] | None = None,
) -> None:
    """``json.dump(obj, fp, ...)`` as strict JSON: non-finite floats as ``null``."""
    json.dump(
        finite_tree(obj),
        fp,
        allow_nan=False,
        indent=indent,
        sort_keys=sort_keys,
        ensure_ascii=ensure_ascii,
        separators=separators,
    )


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"not JSON: {name}")


def loads_strict(text: str | bytes) -> JSON:
    """``json.loads`` that refuses ``NaN``/``Infinity`` (what other parsers do); for tests
    and for readers that must not accept what another tool could not read."""
    return json.loads(text, parse_constant=_refuse_constant)
