"""The documentation site builds with warnings as errors, and its generated references
hold what the code holds (so neither can drift from the parsers and dataclasses)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _reference():
    path = ROOT / "docs/hooks/reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site/reference/cli/index.html").is_file()
    assert (tmp_path / "site/reference/config/index.html").is_file()


def test_cli_reference_lists_every_command_and_option():
    from attnkit.cli.main import COMMANDS, build_parser

    page = _reference().cli_reference()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, command in sub.choices.items():
        assert name in COMMANDS and f"## {name}\n" in page
        for action in command._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help", "--debug"):
                    assert f"`{flag}`" in page, (name, flag)


def test_config_reference_lists_every_key_with_its_default_and_rules():
    from attnkit.training.runconfig import SECTIONS

    page = _reference().config_reference()
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            assert f"| `{section}.{f.name}` |" in page, (section, f.name)
    # the validator's rules, read from __post_init__, and the comments beside a field
    assert "| `train.max_steps` | int | `100000` | all | >= 1 |" in page
    assert "in [0.0, 1.0)" in page  # train.label_smoothing's range
    row = next(line for line in page.splitlines() if line.startswith("| `train.batch_size`"))
    assert "text_classification" in row and "examples per batch" in row
