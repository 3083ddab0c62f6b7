"""Every command that takes a checkpoint accepts ``hf:ORG/NAME``: it calls
``cli.common.named_checkpoint`` before using the option (the Hub itself is
exercised in tests/interop/test_hub.py)."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect

import pytest

from attnkit.cli import common
from attnkit.cli.main import COMMANDS, build_parser
from attnkit.errors import UsageError

# merge reads a LoRA checkpoint, which no import is
NOT_A_HUB_MODEL = {"merge"}


def _options(command: str) -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices[command]._option_string_actions)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_checkpoint_options_resolve_hub_names(command):
    options = _options(command) & {"--checkpoint", "--init"}
    if not options or command in NOT_A_HUB_MODEL:
        return
    module = importlib.import_module(COMMANDS[command][0])
    # called on the option, or handed to the library as its resolver (train's --init)
    used = {
        node.id
        for node in ast.walk(ast.parse(inspect.getsource(module)))
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    assert "named_checkpoint" in used, f"attnkit {command} {options} ignores hf: names"


def test_other_values_pass_through_and_an_empty_name_is_a_usage_error(tmp_path):
    assert common.named_checkpoint(str(tmp_path)) == str(tmp_path)
    assert common.named_checkpoint("runs/hf:odd") == "runs/hf:odd"
    with pytest.raises(UsageError, match="hf:ORG/NAME"):
        common.named_checkpoint("hf:")
    with pytest.raises(UsageError, match="not a Hugging Face Hub model name"):
        common.named_checkpoint("hf:no-slash")
