"""Activation names and special-id picking: one place for every format."""

from __future__ import annotations

import pytest

from attnkit.errors import CheckpointError, ConfigError
from attnkit.interop.conventions import activation_from_hf, activation_to_hf, pick_special_ids


def test_activation_names_both_ways():
    for hf in ("gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
        assert activation_from_hf(hf, "config.json: hidden_act") == "gelu_tanh"
    assert activation_to_hf("gelu_tanh") == "gelu_pytorch_tanh"
    assert activation_from_hf("silu", "x", gated=True) == "swiglu"
    assert activation_to_hf("swiglu") == "silu"
    with pytest.raises(CheckpointError, match=r"^config.json: act: 'swish' is not supported"):
        activation_from_hf("swish", "config.json: act")  # OPUS-MT's plain SiLU FFN
    with pytest.raises(CheckpointError, match="'silu' is not supported"):
        activation_from_hf("silu", "x")  # a plain FFN cannot be SwiGLU
    with pytest.raises(ConfigError, match="^activation: 'geglu'"):
        activation_to_hf("geglu")


def pick(candidates, vocab=10):
    return pick_special_ids(candidates, vocab, why="no token", where="f")


def test_special_ids_are_the_files_where_distinct():
    ids, notes = pick({"eos_id": [2], "bos_id": [1], "pad_id": [2, 0]})  # SmolLM2: pads with EOS
    assert ids == {"pad_id": 0, "bos_id": 1, "eos_id": 2} and notes == []
    ids, _ = pick({"eos_id": [[7], 3], "bos_id": [True, 11, 4]})  # not ids: skipped
    assert (ids["eos_id"], ids["bos_id"]) == (3, 4)


def test_missing_ids_are_nominated_with_a_note():
    ids, notes = pick({"eos_id": [5], "bos_id": [5], "pad_id": [None]})  # GPT-2
    assert ids == {"pad_id": 1, "bos_id": 0, "eos_id": 5}
    assert [n.split(" ")[0] for n in notes] == ["bos_id=0", "pad_id=1"]
    with pytest.raises(CheckpointError, match="^f: a vocabulary of 2 ids has no room"):
        pick({"eos_id": [0]}, vocab=2)
