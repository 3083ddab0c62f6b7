"""The sandbox a chat template runs in, with a ceiling on what it may build.

A chat template is untrusted text (it comes inside a GGUF file or a
``tokenizer_config.json``), and Jinja gives it loops, operators, filters and
the methods of ``str``: ``{{ 'x' * 10**10 }}``, a loop doubling a string with
``~``, ``'x'.ljust(10**10)``, ``'%10000000000d' % 1`` or ``s|replace('x', s)``
would each ask for gigabytes. ``BoundedEnvironment`` keeps every value a
template builds under ``MAX_TEXT`` characters written out:

* the operators ``*``, ``**``, ``+``, ``%`` and ``~``, every filter and every
  call (methods of ``str``, macros, ``lipsum``, ...) refuse an argument past
  the ceiling, and the ones whose result is sized by an argument (a width, a
  repeat or tab count, a separator, a replacement, a format string) estimate
  the result first and refuse before allocating; every result is checked too,
  and an iterator a filter returns is counted as it is consumed;
* integers stay under ``MAX_INT_BITS`` bits (``*`` and ``**``);
* what ``{{ }}`` writes is checked before it is turned into text, and what a
  macro, a ``{% set %}`` block or a ``{% filter %}`` block collects is counted
  as it is collected (the caller counts the top-level output).

"Written out" is ``weight``: a string's length, a list's, tuple's or dict's
printed size estimated from its items' weights (so ``[s] * n`` counts ``n``
copies of ``s``). A refusal is a ``jinja2.TemplateError`` saying "... larger
than the limit ... with" the operator, filter or method.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, ItemsView, Iterable, Iterator, KeysView, Sized, ValuesView
from typing import NoReturn

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import TemplateError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, generate_lorem_ipsum

MAX_TEXT = 1 << 24  # characters (or items) a template may build or write: 16M
MAX_INT_BITS = 1 << 16  # an integer's size (about 20,000 digits)
MAX_DEPTH = 64  # levels of lists in lists a template may write
OPAQUE = 64  # the weight of anything else (a macro, a loop, an undefined name)


def weight(value: object) -> int:
    """About how many characters ``value`` takes written out; counting stops past ``MAX_TEXT``."""
    return _measure(value)[0]


def _measure(value: object) -> tuple[int, int]:
    """``value``'s weight and how deeply its containers nest."""
    memo: dict[int, tuple[int, int]] = {}

    def visit(v: object, depth: int) -> tuple[int, int]:
        if isinstance(v, str):
            return len(v), 0
        if isinstance(v, bytes | bytearray):
            return 4 * len(v) + 3, 0
        if isinstance(v, int | float | complex) and not isinstance(v, bool):
            return (v.bit_length() * 3 // 10 + 2 if isinstance(v, int) else 48), 0
        if isinstance(v, Namespace):
            items: Iterable[object] = getattr(v, "_Namespace__attrs", {}).items()
        elif isinstance(v, dict):
            items = v.items()
        elif isinstance(v, list | tuple | set | frozenset | KeysView | ValuesView | ItemsView):
            items = v
        else:
            return OPAQUE, 0
        key = id(v)
        if key in memo:  # shared items count each time; a value inside itself is '[...]'
            return memo[key]
        if depth >= MAX_DEPTH:
            raise TemplateError(f"nests values deeper than the limit ({MAX_DEPTH} levels)")
        memo[key] = (OPAQUE, 0)
        total, deepest = 2, 0
        for item in items:
            pair = item if isinstance(item, tuple) and isinstance(v, dict | Namespace) else (item,)
            for x in pair:
                size, inner = visit(x, depth + 1)
                total += size + (4 if isinstance(x, str) else 2)  # quotes, separator
                deepest = max(deepest, inner + 1)
            if total > MAX_TEXT:
                break
        memo[key] = (total, deepest)
        return memo[key]

    return visit(value, 0)


def _refuse(what: str) -> NoReturn:
    raise TemplateError(f"builds a value larger than the limit ({MAX_TEXT} characters) with {what}")


def _check(size: int, what: str) -> None:
    if size > MAX_TEXT:
        _refuse(what)


def _checked(value: object, what: str) -> object:
    """``value``, or a refusal when it is past the ceiling; an iterator is counted as it runs."""
    if isinstance(value, Iterator) and not isinstance(value, Sized):
        return _counted(value, what)
    _check(weight(value), what)
    return value


def _counted(items: Iterator[object], what: str) -> Iterator[object]:
    total = 0
    for item in items:
        total += weight(item) + 2
        _check(total, what)
        yield item


def _int(x: object, default: int = 0) -> int:
    return x if isinstance(x, int) else default


def _text_weight(x: object) -> int:
    return len(x) if isinstance(x, str | bytes) else weight(x)


def _format_size(fmt: object, args: object) -> int:
    """A bound on ``fmt % args`` or ``fmt.format(...)``: each field may write all of
    ``args``, each number in ``fmt`` may be a width, and with ``*`` or a ``{`` inside
    a field the integers in ``args`` may be widths too."""
    if not isinstance(fmt, str | bytes):
        return 0
    text = fmt if isinstance(fmt, str) else fmt.decode("latin-1")
    fields = text.count("%") + text.count("{") + 1
    size = len(text) + fields * weight(args)
    size += sum(int(d) if len(d) <= 9 else MAX_TEXT + 1 for d in re.findall(r"\d+", text))
    if "*" in text or re.search(r"\{[^{}]*\{", text):
        size += sum(abs(x) for x in _shallow(args, 2) if isinstance(x, int))
    return size


def _shallow(x: object, depth: int) -> Iterator[object]:
    """``x`` and what its tuples, lists and dicts hold, ``depth`` levels down."""
    yield x
    if depth and isinstance(x, list | tuple | dict):
        for item in x.values() if isinstance(x, dict) else x:
            yield from _shallow(item, depth - 1)


def _hits(s: object, sub: object) -> int | None:
    """How often ``sub`` is found in ``s``; ``None`` unless both are text or both bytes."""
    if isinstance(s, str) and isinstance(sub, str):
        return s.count(sub) if sub else len(s) + 1
    if isinstance(s, bytes | bytearray) and isinstance(sub, bytes | bytearray):
        return s.count(sub) if sub else len(s) + 1
    return None


def _replace_size(s: object, old: object, new: object, count: object) -> int:
    n = _text_weight(s)
    hits = _hits(s, old)
    if hits is None:
        hits = n + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return n + hits * max(_text_weight(new) - _text_weight(old), 0)


def _pieces(items: object) -> Sized:
    """``items`` as a list when it is a one-pass iterator (so it can be sized first)."""
    if isinstance(items, Sized):
        return items
    if not isinstance(items, Iterable):
        raise TypeError(f"{type(items).__name__!r} object is not iterable")  # list()'s words
    return list(items)


def _tojson_size(a: dict[str, object]) -> int:
    indent = a.get("indent")
    size, depth = _measure(a.get("value", a.get("x")))
    width = len(indent) if isinstance(indent, str) else _int(indent)
    return size + (size // 3 + 1) * (width * depth + 1)


def _join_size(a: dict[str, object]) -> int:
    a["value"] = pieces = _pieces(a["value"])
    return weight(pieces) + _text_weight(a["d"]) * len(pieces)


def _indent_size(a: dict[str, object]) -> int:
    s, width = a["s"], a["width"]
    lines = s.count("\n") + 1 if isinstance(s, str) else weight(s) + 1
    return weight(s) + lines * (len(width) if isinstance(width, str) else _int(width))


def _wordwrap_size(a: dict[str, object]) -> int:
    s, wrap = a["s"], a["wrapstring"]
    n = _text_weight(s)
    breaks = sum(s.count(c) for c in " -\n") if isinstance(s, str) else n
    lines = n // max(_int(a["width"]), 1) + breaks + 1
    return n + lines * (len(wrap) if isinstance(wrap, str) else 1)


def _chars_size(a: dict[str, object]) -> int:  # a string made a list of characters
    value = a["value"]
    return 5 * len(value) + 2 if isinstance(value, str) else 0


# Filters whose result is sized by an argument: an estimate from their bound arguments.
FILTER_SIZES: dict[str, Callable[[dict[str, object]], int]] = {
    "center": lambda a: max(_text_weight(a["value"]), _int(a["width"])),
    "indent": _indent_size,
    "join": _join_size,
    "replace": lambda a: _replace_size(a["s"], a["old"], a["new"], a["count"]),
    "format": lambda a: _format_size(a["value"], (a["args"], a["kwargs"])),
    "wordwrap": _wordwrap_size,
    "batch": lambda a: (
        0 if a["fill_with"] is None else _int(a["linecount"]) * (weight(a["fill_with"]) + 2)
    ),
    "tojson": _tojson_size,
    "list": _chars_size,
    "sort": _chars_size,
}


def _method_size(
    obj: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[int, tuple[object, ...]]:
    """An estimate of a call's result (with its arguments, an iterator made a list),
    for the methods of ``str``/``bytes`` and ``lipsum`` that a size argument drives."""

    def arg(i: int, key: str, default: object = None) -> object:
        return args[i] if len(args) > i else kwargs.get(key, default)

    if obj is generate_lorem_ipsum:
        return _int(arg(0, "n", 5)) * _int(arg(3, "max", 100)) * 12, args
    inner = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
    owner, name = getattr(inner, "__self__", None), getattr(inner, "__name__", "")
    if not isinstance(owner, str | bytes | bytearray):
        return 0, args
    n = len(owner)
    if name in ("ljust", "rjust", "center", "zfill"):
        return max(n, _int(arg(0, "width"))), args
    if name == "expandtabs":
        tabs = _hits(owner, "\t" if isinstance(owner, str) else b"\t") or 0
        return n + tabs * max(_int(arg(0, "tabsize", 8)), 0), args
    if name == "replace":
        return _replace_size(owner, arg(0, "old"), arg(1, "new"), arg(2, "count", -1)), args
    if name in ("format", "format_map"):
        return _format_size(owner, (args, kwargs)), args
    if name == "join" and args:
        items = _pieces(args[0])
        return weight(items) + n * len(items), (items, *args[1:])
    if name in ("split", "rsplit", "splitlines"):  # a list of pieces: 4 more characters each
        sep = arg(0, "sep") if name != "splitlines" else None
        most = _int(arg(1, "maxsplit"), -1) if name != "splitlines" else -1
        hits = _hits(owner, sep) if sep else None
        pieces = (n if hits is None else hits) + 1
        return n + 4 * (min(pieces, most + 1) if most >= 0 else pieces), args
    table = arg(0, "table")
    if name == "translate" and isinstance(table, dict):
        return n * max([1, *(_text_weight(v) for v in table.values() if v is not None)]), args
    return 0, args


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's compiler with ``~`` and the collecting buffers (macros, ``{% set %}`` and
    ``{% filter %}`` blocks, ``caller()``) going through the environment's bounds."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        else:
            join = "markup_join" if frame.eval_ctx.autoescape else "str_join"
        self.write(f"environment.bounded_concat({join}, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.bounded_buffer()")


class _Buffer(list[str]):
    """A list of written pieces that refuses to hold more than ``MAX_TEXT`` characters."""

    size = 0

    def append(self, piece: str) -> None:
        if piece:  # (ten billion empty pieces would be 80 GB of list)
            self.size += len(piece)
            _check(self.size, "what a macro or block writes")
            super().append(piece)

    def extend(self, pieces: Iterable[str]) -> None:
        for piece in pieces:
            self.append(piece)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the size bounds above (the module's docstring)."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(
        self, *, filters: dict[str, Callable[..., object]] | None = None, **options: object
    ) -> None:
        super().__init__(finalize=self._finalize, **options)
        self.filters.update(filters or {})
        self.filters = {name: self._bounded_filter(name, f) for name, f in self.filters.items()}

    @staticmethod
    def _finalize(value: object) -> object:
        _check(weight(value), "'{{ }}'")
        return value

    @staticmethod
    def bounded_concat(join: Callable[[object], str], parts: tuple[object, ...]) -> str:
        _check(sum(weight(p) for p in parts), "'~'")
        return join(parts)

    @staticmethod
    def bounded_buffer() -> list[str]:
        return _Buffer()

    def call_binop(self, context: Context, operator: str, left: object, right: object) -> object:
        what = repr(operator)
        _checked(left, what)
        _checked(right, what)
        if operator == "*" and isinstance(left, int) and isinstance(right, int):
            bits = left.bit_length() + right.bit_length()
        elif (
            operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1
        ):
            bits = left.bit_length() * max(right, 0)
        else:
            bits = 0
        if bits > MAX_INT_BITS:
            raise TemplateError(
                f"builds an integer larger than the limit ({MAX_INT_BITS} bits) with {what}"
            )
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, str | bytes | list | tuple) and isinstance(n, int):
                    _check(weight(seq) * n, what)
        elif operator == "+":
            _check(weight(left) + weight(right), what)
        elif operator == "%":
            _check(_format_size(left, right), what)
        return _checked(super().call_binop(context, operator, left, right), what)

    def call(self, context: Context, obj: object, /, *args: object, **kwargs: object) -> object:
        what = f"{getattr(obj, '__name__', type(obj).__name__)}()"
        for a in (*args, *kwargs.values()):
            _checked(a, what)
        size, args = _method_size(obj, args, kwargs)
        _check(size, what)
        return _checked(super().call(context, obj, *args, **kwargs), what)

    def _bounded_filter(self, name: str, f: Callable[..., object]) -> Callable[..., object]:
        what = f"the {name!r} filter"
        estimate = FILTER_SIZES.get(name)
        try:
            signature = inspect.signature(f) if estimate else None
        except (TypeError, ValueError):  # pragma: no cover - every built-in filter has one
            signature = None

        @functools.wraps(f)  # keeps jinja's pass_context/pass_environment marks
        def bounded(*args: object, **kwargs: object) -> object:
            for a in (*args, *kwargs.values()):
                _checked(a, what)
            if signature is not None and estimate is not None:
                # jinja passes some filters a context their signature does not show
                for skip in (0, 1):
                    try:
                        bound = signature.bind(*args[skip:], **kwargs)
                    except TypeError:
                        continue  # (else the filter says what is wrong with its arguments)
                    bound.apply_defaults()
                    _check(estimate(bound.arguments), what)
                    args, kwargs = (*args[:skip], *bound.args), bound.kwargs
                    break
            return _checked(f(*args, **kwargs), what)

        return bounded


__all__ = ["MAX_INT_BITS", "MAX_TEXT", "BoundedEnvironment", "weight"]
