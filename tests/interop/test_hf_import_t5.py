"""A random ``T5ForConditionalGeneration`` that transformers saved imports with equal logits:
the original T5 (ReLU, tied output, rescaled) and T5 v1.1 (gated GELU, its own lm_head)."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.errors import CheckpointError
from attnkit.interop.hf.importer import import_hf

transformers = pytest.importorskip("transformers")

WORDS = ["the", "a", "house", "dog", "runs", "by", "lake", "fast", "ein", "Haus", "Hund"]
VOCAB = 40  # the model's rows: more than the tokenizer's 3 + 11 (as T5's 32128 > 32100)


def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(["<pad>", "</s>", "<unk>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<pad>", "</s>", "<unk>"])
    return str(tok.to_str())


def _hf_t5(ffn: str, tied: bool, seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, num_heads=4, d_ff=48, num_layers=2,
        num_decoder_layers=3, relative_attention_num_buckets=8,
        relative_attention_max_distance=16, feed_forward_proj=ffn, dropout_rate=0.0,
        tie_word_embeddings=tied, decoder_start_token_id=0,
    )  # fmt: skip
    hf = transformers.T5ForConditionalGeneration(config)
    if not tied:  # T5 v1.1: an output projection of its own
        hf.lm_head.weight = torch.nn.Parameter(torch.randn(VOCAB, 32))
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "relative_attention_bias" in name:  # positions must matter
                p.copy_(2.0 * torch.randn_like(p))
            elif "layer_norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    return hf.eval()


@pytest.fixture(scope="module", params=[("relu", True), ("gated-gelu", False)], ids=str)
def imported(request, tmp_path_factory):
    ffn, tied = request.param
    hf = _hf_t5(ffn, tied)
    root = tmp_path_factory.mktemp("t5")
    hf.save_pretrained(root / "hf")
    (root / "hf" / "tokenizer.json").write_text(_tokenizer_json())
    assert main(["import", "--from", "hf", str(root / "hf"), "--out", str(root / "run")]) == 0
    return hf, load_model(root / "run", "cpu"), root


def test_the_config_is_t5s(imported):
    hf, ours, _ = imported
    c = ours.config
    assert (c.positions, c.norm, c.norm_position, c.attention_score, c.bias) == (
        "t5_relative", "rmsnorm", "pre", "dot", False,
    )  # fmt: skip
    assert (c.num_encoder_layers, c.num_decoder_layers, c.relative_buckets) == (2, 3, 8)
    gated = hf.config.is_gated_act
    assert c.activation == ("gated_gelu" if gated else "relu")
    assert c.share_embeddings == ("inputs" if gated else "all")
    assert c.scale_output == (not gated)
    assert (c.pad_id, c.bos_id, c.eos_id) == (0, 0, 1)


def test_logits_equal_transformers(imported):
    hf, ours, _ = imported
    model = ours.model.eval()
    torch.manual_seed(1)
    src = torch.randint(3, VOCAB, (3, 9))
    src[2, 6:] = 0  # a padded row
    tgt = torch.randint(3, VOCAB, (3, 7))
    tgt[:, 0] = 0  # T5 starts the decoder from <pad>
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt).logits
        mine = model(src, tgt).logits
    diff = (mine - theirs).abs().max().item()
    assert diff <= 1e-5, diff
    assert theirs.abs().max() > 1.0  # not a vacuous comparison


def test_cached_decoding_equals_transformers_greedy(imported):
    from attnkit.decoding import greedy_search

    hf, ours, _ = imported
    torch.manual_seed(2)
    src = torch.randint(3, VOCAB, (2, 8))
    with torch.no_grad():
        theirs = torch.zeros(2, 1, dtype=torch.long)  # greedy by full forwards, no cache
        for _ in range(6):
            logits = hf(input_ids=src, decoder_input_ids=theirs).logits[:, -1]
            theirs = torch.cat([theirs, logits.argmax(-1, keepdim=True)], 1)
        got = greedy_search(ours.model.eval(), src, max_len_a=0, max_len_b=6)
    for row, tokens in enumerate(got.tokens):  # ours stops at EOS (id 1), not dropped
        expected = theirs[row, 1 : 1 + len(tokens)].tolist()
        assert tokens == expected
        if len(tokens) < 6:
            assert theirs[row, 1 + len(tokens)] == 1


def test_the_tokenizer_and_record_come_along(imported):
    _, ours, root = imported
    tok = ours.tokenizer
    assert tok.encode("the dog runs") == [3, 6, 7]
    assert tok.decode([0, 3, 6, 1]) == "the dog"
    record = json.loads((root / "run" / "import.json").read_text())
    assert record["model_type"] == "t5" and record["family"] == "transformer"
    assert any("<pad>" in note for note in record["notes"])


def test_a_narrower_attention_is_refused_naming_d_kv(tmp_path):
    hf = _hf_t5("relu", True)
    hf.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "tokenizer.json").write_text(_tokenizer_json())
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["d_kv"] = 4
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="d_kv"):
        import_hf(tmp_path / "hf", tmp_path / "run")
    assert not (tmp_path / "run").exists()
