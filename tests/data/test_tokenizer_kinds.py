"""The tokenizer-kind table: every kind reads back what it writes, the legacy ``"hf"``
kind still loads, and bad JSON is a one-line ``DataError``."""

from __future__ import annotations

import json

import pytest

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.data.tokenizer_kinds import KINDS, load_tokenizer, tokenizer_from_json
from attnkit.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer, WordTokenizer
from attnkit.data.unigram import SentencePieceTokenizer
from attnkit.errors import DataError

tokenizers = pytest.importorskip("tokenizers")

TEXTS = ["the cat sat on the mat", "a dog sat on a log"] * 5


def one_of_each() -> list[Tokenizer]:
    hf = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[PAD]": 0, "[UNK]": 1, "cat": 2,
                                                           "[CLS]": 3, "[SEP]": 4},
                                                          unk_token="[UNK]"))  # fmt: skip
    hf.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return [
        BPETokenizer.train(TEXTS, vocab_size=40, min_frequency=1),
        CharTokenizer.train(TEXTS),
        WordTokenizer.train(TEXTS),
        PretrainedTokenizer(hf, pad_id=0, bos_id=3, eos_id=4, unk_id=1),
        SentencePieceTokenizer.train_unigram(TEXTS, vocab_size=300),
    ]


def test_every_kind_is_in_the_table_and_reads_back_what_it_wrote(tmp_path) -> None:
    made = one_of_each()
    assert {t.kind for t in made} | {"hf"} == set(KINDS)
    for tok in made:
        back = tokenizer_from_json(tok.to_json())
        assert type(back) is type(tok)
        assert back.special_ids == tok.special_ids
        assert back.encode("the cat sat") == tok.encode("the cat sat")
        tok.save(tmp_path / f"{tok.kind}.json")
        assert load_tokenizer(tmp_path / f"{tok.kind}.json").to_json() == tok.to_json()


def test_reads_the_older_hf_kind() -> None:
    """GGUF imports saved before PretrainedTokenizer took them over still load, with
    their ids and decode skipping the file's special tokens."""
    hf = tokenizers.Tokenizer(tokenizers.models.BPE())
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(TEXTS, trainer)
    old = {
        "kind": "hf",
        "version": 1,
        "hf": json.loads(hf.to_str()),
        "special_ids": {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": None},
        "chat_template": "{{x}}",
    }
    tok = tokenizer_from_json(json.dumps(old))
    assert isinstance(tok, PretrainedTokenizer) and tok.chat_template == "{{x}}"
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, None)
    assert tok.decode(tok.encode("<|im_start|>the cat<|im_end|>")) == "the cat"
    assert json.loads(tok.to_json())["kind"] == "pretrained"  # saved again as today's kind


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ('{"kind": "wordpiece"}', "unknown kind 'wordpiece'; expected one of bpe, char"),
        ('["char"]', "unknown kind None"),
        ('{"kind": "char", "version": 2, "pieces": []}', "unsupported version 2"),
        ('{"kind": "char", "version": 1}', r"tokenizer JSON \(char\): malformed \(KeyError"),
        ('{"kind": "bpe", "version": 1, "hf": {"model": 1}}', r"\(bpe\): malformed"),
    ],
)
def test_bad_json_is_a_data_error(text: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        tokenizer_from_json(text)


def test_a_bad_file_is_named(tmp_path) -> None:
    (tmp_path / "tok.json").write_text('{"kind": "nope", "version": 1}', encoding="utf-8")
    with pytest.raises(DataError, match=r"^.*tok\.json: tokenizer JSON: unknown kind 'nope'"):
        load_tokenizer(tmp_path / "tok.json")
