"""Strict JSON out: ``attnkit.jsonio`` never writes NaN or Infinity, and every JSON
attnkit writes or prints goes through it."""

from __future__ import annotations

import ast
import io
import json
import math
from pathlib import Path

import pytest

from attnkit import jsonio

PACKAGE = Path(__file__).parents[1] / "attnkit"
NONFINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", NONFINITE)
def test_a_nonfinite_value_is_null_with_its_reason(value):
    name = jsonio.finite_tree({"x": value})["nonfinite"]["x"]
    assert name == {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(value)]
    tree = {"loss": value, "valid": {"ppl": value, "bleu": 3.5}, "curve": [1.0, value],
            "pair": (value, 2), "nested": [[{"a": value}]]}  # fmt: skip
    text = jsonio.dumps(tree, indent=1)
    back = jsonio.loads_strict(text)  # raises on NaN/Infinity
    assert back["loss"] is None and back["nonfinite"] == {"loss": name}
    assert back["valid"] == {"ppl": None, "bleu": 3.5, "nonfinite": {"ppl": name}}
    assert back["curve"] == [1.0, None] and back["pair"] == [None, 2]
    assert back["nested"] == [[{"a": None, "nonfinite": {"a": name}}]]
    stream = io.StringIO()
    jsonio.dump(tree, stream)
    assert jsonio.loads_strict(stream.getvalue()) == jsonio.loads_strict(jsonio.dumps(tree))


def test_finite_trees_are_encoded_exactly_as_json_does():
    """Digests over dumps output (sort_keys) must not change: same bytes, same objects."""
    tree = {"b": [1, 2.5, {"c": "é"}], "a": None, "nonfinite": 1, "t": (1, 2)}
    for kwargs in ({}, {"sort_keys": True}, {"indent": 2, "ensure_ascii": False},
                   {"separators": (",", ":")}):  # fmt: skip
        assert jsonio.dumps(tree, **kwargs) == json.dumps(tree, **kwargs)
    assert jsonio.finite_tree(tree) is tree


def test_a_float_that_slips_through_is_an_error_not_invalid_json():
    class Sneaky(float):  # a float subclass claiming to be finite would still be caught
        pass

    assert jsonio.dumps([Sneaky(1.5)]) == "[1.5]"
    with pytest.raises(ValueError):
        json.dumps(float("nan"), allow_nan=False)  # what dumps relies on


def test_loads_strict_refuses_what_other_parsers_refuse():
    for text in ("NaN", '{"a": Infinity}', "[-Infinity]"):
        with pytest.raises(ValueError, match="not JSON"):
            jsonio.loads_strict(text)


def _json_writes(tree: ast.AST) -> list[int]:
    """Lines calling ``json.dump``/``json.dumps`` directly."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("dump", "dumps") and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "json"]  # fmt: skip


def test_every_json_write_in_the_package_goes_through_jsonio():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "jsonio.py":
            continue
        for line in _json_writes(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert offenders == [], "use attnkit.jsonio.dumps/dump (strict JSON): " + ", ".join(offenders)
    assert _json_writes(ast.parse("import json\njson.dumps(1)\n")) == [2]  # the scan works
