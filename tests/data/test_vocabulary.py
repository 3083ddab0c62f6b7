"""The bounded tokenizer sample, and reusing a user's tokenizer file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.data.tokenizers import BPETokenizer
from attnkit.data.vocabulary import Reservoir, load_tokenizer_file, train_tokenizer
from attnkit.errors import DataError, UsageError


def test_a_small_stream_is_sampled_whole_and_in_order() -> None:
    r: Reservoir[int] = Reservoir(100)
    for start in range(0, 90, 7):
        r.add(list(range(start, min(start + 7, 90))))
    assert r.items == list(range(90)) and r.seen == 90
    everything: Reservoir[int] = Reservoir(0)  # 0: no bound
    everything.add(list(range(5000)))
    assert everything.items == list(range(5000))


def test_a_large_stream_gives_a_uniform_seeded_sample() -> None:
    def sample(seed: int, chunk: int) -> list[int]:
        r: Reservoir[int] = Reservoir(1000, seed=seed)
        for start in range(0, 100_000, chunk):
            r.add(list(range(start, start + chunk)))
        assert r.seen == 100_000 and len(r.items) == 1000
        return r.items

    a = sample(0, 1000)
    assert a == sample(0, 1000) and a != sample(1, 1000)
    assert a == sample(0, 250)  # the same draws however the stream is chunked
    # Uniform: each tenth of the stream supplies about a tenth of the sample.
    counts = np.bincount(np.array(a) // 10_000, minlength=10)
    assert counts.min() > 60 and counts.max() < 140, counts


def test_trained_kinds() -> None:
    texts = ["ein Hund", "zwei Hunde", "ein Haus"] * 5
    assert train_tokenizer("char", texts, 100).kind == "char"
    assert train_tokenizer("bpe", texts, 40).kind == "bpe"
    with pytest.raises(UsageError, match="tokenizer.kind"):
        train_tokenizer("wordpiece", texts, 40)


def _hf_json(tmp_path, specials: list[str]):
    import tokenizers as tk

    hf = tk.Tokenizer(tk.models.WordLevel({"[UNK]": 0, "hund": 1, "katze": 2}, unk_token="[UNK]"))
    hf.pre_tokenizer = tk.pre_tokenizers.Whitespace()
    hf.add_special_tokens(specials)
    path = tmp_path / "tokenizer.json"
    path.write_text(hf.to_str())
    return path


def test_a_hugging_face_tokenizer_json_is_reused_with_its_special_ids(tmp_path) -> None:
    tok = load_tokenizer_file(_hf_json(tmp_path, ["[PAD]", "[CLS]", "[SEP]"]))
    assert isinstance(tok, PretrainedTokenizer)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (3, 4, 5, 0)
    assert tok.encode("hund katze") == [1, 2] and tok.decode([4, 1, 2, 5, 3]) == "hund katze"
    # No pad token: one is added after the vocabulary; "</s>" alone serves as BOS and EOS.
    tok = load_tokenizer_file(_hf_json(tmp_path, ["</s>"]))
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.vocab_size) == (3, 3, 4, 5)
    with pytest.raises(DataError, match=r"tokenizer\.json: no begin/end-of-sequence token"):
        load_tokenizer_file(_hf_json(tmp_path, []))


def test_an_attnkit_tokenizer_json_and_bad_files(tmp_path) -> None:
    bpe = BPETokenizer.train(["ein Hund", "zwei Hunde"] * 5, 30)
    bpe.save(tmp_path / "mine.json")
    assert load_tokenizer_file(tmp_path / "mine.json").to_json() == bpe.to_json()
    (tmp_path / "broken.json").write_text('{"model": ')
    with pytest.raises(DataError, match=r"broken\.json:1: not valid JSON"):
        load_tokenizer_file(tmp_path / "broken.json")
    (tmp_path / "other.json").write_text(json.dumps({"model": {"type": "nonsense"}}))
    with pytest.raises(DataError, match=r"other\.json: not a Hugging Face tokenizer\.json"):
        load_tokenizer_file(tmp_path / "other.json")
