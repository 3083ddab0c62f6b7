"""A Hugging Face tokenizer.json's ids are checked against its size before it is loaded."""

from __future__ import annotations

import json
import resource
import time

import pytest

from attnkit.data.hf_ids import check_hf_ids, dense_limit
from attnkit.data.tokenizers import hf_tokenizer_from_json
from attnkit.data.vocabulary import load_tokenizer_file
from attnkit.errors import DataError


def _tokenizer_json(added_ids: list[int] = (), *, processor: dict | None = None) -> dict:
    """A WordLevel tokenizer.json of 90 ids (letters and specials), plus added tokens."""
    vocab = {chr(0x100 + i): i for i in range(87)} | {"<s>": 87, "</s>": 88, "<unk>": 89}
    added = [{"id": i, "content": f"<x{n}>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for n, i in enumerate(added_ids)]  # fmt: skip
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": processor, "decoder": None,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}  # fmt: skip


def test_a_dense_file_loads():
    assert check_hf_ids(_tokenizer_json([90, 91]), "t.json") == 92
    assert hf_tokenizer_from_json(_tokenizer_json([90]), "t.json").get_vocab_size() == 91
    # a few unused ids are fine (some vocabularies reserve them)
    assert check_hf_ids(_tokenizer_json([dense_limit(91) - 1]), "t.json") == 91


@pytest.mark.parametrize(
    ("ids", "message"),
    [([70_000], "added token '<x0>' has id 70000, but the file defines 91 ids; ids must lie "
                "in 0..1,114 (dense): renumber it"),
     ([10**9 + i for i in range(4)], "added token '<x0>' has id 1000000000"),
     ([-1], "added token '<x0>' has id -1; ids are integers >= 0"),
     ([2.5], "added token '<x0>' has id 2.5; ids are integers >= 0")],
)  # fmt: skip
def test_an_id_past_the_size_is_refused_naming_the_file_and_the_id(tmp_path, ids, message):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(_tokenizer_json(ids)))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(DataError) as error:
        load_tokenizer_file(path)
    # Refused before tokenizers sized a table by the id (ids near 10**9: 31 s and 4 GB).
    assert time.perf_counter() - started < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB
    assert str(error.value).startswith(f"{path}: {message}")
    assert "\n" not in str(error.value)


def test_a_post_processor_id_past_the_size_is_refused():
    special = {"<s>": {"id": "<s>", "ids": [5_000_000], "tokens": ["<s>"]}}
    processor = {"type": "TemplateProcessing", "single": [], "pair": [], "special_tokens": special}
    with pytest.raises(DataError, match=r"t.json: post-processor token '<s>' has id 5000000"):
        check_hf_ids(_tokenizer_json(processor=processor), "t.json")
    bert = {"type": "BertProcessing", "sep": ["</s>", 88], "cls": ["<s>", 10**12]}
    with pytest.raises(DataError, match=r"post-processor cls token '<s>' has id 1000000000000"):
        check_hf_ids(_tokenizer_json(processor=bert), "t.json")


def test_a_checkpoints_embedded_tokenizer_is_checked_too():
    from attnkit.data.tokenizer_kinds import tokenizer_from_json

    state = {"kind": "bpe", "version": 1, "hf": _tokenizer_json([10**9])}
    with pytest.raises(DataError, match=r"tokenizer JSON: added token '<x0>' has id 1000000000"):
        tokenizer_from_json(json.dumps(state))
