"""Run configs read numbers as users write them and refuse unusable values by name."""

from __future__ import annotations

import pytest

from attnkit.errors import ConfigError
from attnkit.training.config_yaml import parse_yaml
from attnkit.training.runconfig import (
    MAX_GRAD_ACCUM,
    MAX_VOCAB_SIZE,
    RunConfig,
    apply_overrides,
    load_run_config,
)


@pytest.mark.parametrize(
    "text,value",
    [("1e-3", 1e-3), ("1E3", 1e3), ("-2e-4", -2e-4), ("+1e3", 1e3), ("1.e3", 1e3),
     (".5", 0.5), ("5e4", 5e4), ("1_000.5", 1000.5), ("1.0e-3", 1e-3)],
)  # fmt: skip
def test_floats_are_read_as_users_write_them(text, value):
    assert parse_yaml(f"x: {text}") == {"x": value}
    assert isinstance(parse_yaml(text), float)


def test_everything_else_is_read_as_safe_load_reads_it():
    data = parse_yaml("a: 12\nb: on\nc: 0x10\nd: 1.2.3\ne: text\nf: .inf\ng: nan")
    assert data == {"a": 12, "b": True, "c": 16, "d": "1.2.3", "e": "text",
                    "f": float("inf"), "g": "nan"}  # fmt: skip
    import yaml

    assert yaml.safe_load("x: 1e-3") == {"x": "1e-3"}  # PyYAML's own loader is untouched


def test_set_and_config_files_take_1e_minus_3(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("train: {lr: 5e-4, schedule: cosine}\n")
    assert load_run_config(config).train.lr == 5e-4
    assert load_run_config(config, ["train.lr=1e-3"]).train.lr == 1e-3


@pytest.mark.parametrize(
    "override,words",
    [
        ("train.lr=.inf", "train.lr: must be a finite number, got inf"),
        ("train.lr=.nan", "train.lr: must be a finite number, got nan"),
        ("train.max_minutes=-.inf", "train.max_minutes: must be a finite number"),
        ("model.dropout=.nan", "model.dropout: must be a finite number"),
        ("train.seed=-1", "train.seed: must be in [0, 2**63), got -1"),
        ("train.seed=18446744073709551616", "train.seed: must be below 2**63"),
        ("train.max_steps=100000000000000000000", "train.max_steps: must be below 2**63"),
        ("train.grad_accum=1e20", "train.grad_accum: expected int, got float"),
        (f"train.grad_accum={MAX_GRAD_ACCUM + 1}", f"must be <= {MAX_GRAD_ACCUM}"),
        ("train.threads=1000000", "train.threads: must be in [1, 1024]"),
        ("tokenizer.vocab_size=1000000000000", f"must be <= {MAX_VOCAB_SIZE}"),
        ("decode.alpha=1e308", "decode.alpha: must be in [0, 10]"),
    ],
)
def test_unusable_numbers_are_refused_by_name(override, words):
    with pytest.raises(ConfigError) as e:
        config = RunConfig.from_dict(apply_overrides({}, [override]))
        if override.startswith("model."):  # the model section is validated by its builder
            from attnkit.models import TransformerConfig
            from attnkit.training.tasks.base import model_config_from_run

            model_config_from_run(config, families=(TransformerConfig,), defaults={})
    assert words in str(e.value)


def test_a_config_nested_thousands_deep_is_one_config_error(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("model: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(ConfigError, match="deep.yaml: nested too deeply"):
        load_run_config(deep)
    with pytest.raises(ConfigError, match="--set model.x: value nested too deeply"):
        load_run_config(None, ["model.x=" + "[" * 3000 + "]" * 3000])


@pytest.mark.parametrize(
    "override,message",
    [
        ("train.betas=[0.9, 0.98, 0.5]",
         "train.betas: expected 2 values (float, float) or null, got 3 values [0.9, 0.98, 0.5]"),
        ("train.betas=[0.9]", "train.betas: expected 2 values (float, float) or null, got 1 value"),
        ("train.betas=[0.9, high]", "train.betas[1]: expected float, got str 'high'"),
        ("train.betas=0.9", "train.betas: expected 2 values (float, float) or null, got float"),
    ],
)  # fmt: skip
def test_a_list_of_the_wrong_length_or_item_says_which(override, message):
    """Not "expected tuple, got tuple": the length wanted and given, or the item at fault."""
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict(apply_overrides({}, [override]))
    assert str(e.value).startswith(message), str(e.value)
    assert "tuple" not in str(e.value)


def test_nested_and_literal_items_are_named_by_index():
    from typing import Literal

    from attnkit.validation import check_value

    cases = [
        (tuple[Literal["q", "v"], ...], ("q", "x"), "x[1]: expected one of q, v; got 'x'"),
        (tuple[tuple[int, int], ...], ((1, 2), (3,)), "x[1]: expected 2 values (int, int), got 1"),
        (list[str], "abc", "x: expected a list of str, got str 'abc'"),
    ]
    for annotation, value, message in cases:
        with pytest.raises(ConfigError) as e:
            check_value("x", value, annotation)
        assert str(e.value).startswith(message), str(e.value)
