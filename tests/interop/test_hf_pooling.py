"""What a sentence-transformers directory says about pooling, read into the import record."""

from __future__ import annotations

import json

import pytest

from attnkit.errors import CheckpointError
from attnkit.interop.hf.pooling import sentence_embedding_details


def _write(root, modules, pooling, bert=None):
    (root / "1_Pooling").mkdir(parents=True)
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling/config.json").write_text(json.dumps(pooling))
    if bert is not None:
        (root / "sentence_bert_config.json").write_text(json.dumps(bert))


MODULES = [{"path": "", "type": "sentence_transformers.models.Transformer"},
           {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]  # fmt: skip


def test_plain_transformers_directory_has_none(tmp_path):
    assert sentence_embedding_details(tmp_path) is None


def test_pooling_normalize_and_length(tmp_path):
    modules = [*MODULES, {"path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    _write(tmp_path, modules, {"pooling_mode_max_tokens": True}, {"max_seq_length": 128})
    assert sentence_embedding_details(tmp_path) == {
        "pooling": "max", "normalize": True, "max_seq_length": 128,
    }  # fmt: skip
    other = tmp_path / "b"
    _write(other, MODULES, {"pooling_mode_cls_token": True})
    assert sentence_embedding_details(other) == {
        "pooling": "cls", "normalize": False, "max_seq_length": None,
    }  # fmt: skip


def test_two_modes_at_once_is_one_line_naming_the_file(tmp_path):
    _write(tmp_path, MODULES, {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True})
    with pytest.raises(CheckpointError, match=r"1_Pooling/config.json: expected exactly one"):
        sentence_embedding_details(tmp_path)
