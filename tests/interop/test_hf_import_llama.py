"""LlamaForCausalLM checkpoints (random, saved by transformers) into DecoderOnlyLM.

The Hugging Face Llama import runs through the key table the GGUF import
uses (``attnkit.interop.llama.LLAMA_KEYS``); here it is checked against
transformers' own Llama on a small random model with grouped-query attention:
logits, greedy continuations, the config it builds, and one-line refusals of
what attnkit's Llama cannot express.
"""

from __future__ import annotations

import json

import pytest
import torch
from interop_helpers import TEXT, assert_same_logits, byte_level_tokenizer, import_saved

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.decoding.greedy import greedy_search
from attnkit.interop.import_writer import read_import_record

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def random_llama(*, tied: bool, **overrides):
    """A random LlamaForCausalLM (GQA: 4 query heads, 2 key/value heads) and its tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = byte_level_tokenizer(SPECIALS, bos_token="<|im_start|>", eos_token="<|im_end|>")
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=48,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, rope_theta=500.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=tied, bos_token_id=1, eos_token_id=[2],
                      pad_token_id=None, **overrides)  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # vary every weight, the norms' included
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model, tok


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def llama(request, tmp_path_factory):
    model, tok = random_llama(tied=request.param)
    return model, tok, import_saved(model, tok, tmp_path_factory.mktemp("llama") / "hf")


def test_logits_match_transformers(llama):
    hf, tok, run = llama
    assert_same_logits(run, hf, tok, TEXT, add_special_tokens=False)


def test_greedy_continuations_match_transformers(llama):
    hf, tok, run = llama
    loaded = load_model(run, "cpu")
    for text in ["the quick", "a lazy cat", "dog"]:
        ids = torch.tensor([[1, *tok(text, add_special_tokens=False).input_ids]])
        ours = greedy_search(loaded.model, ids, max_len_a=0, max_len_b=12).tokens[0]
        theirs = hf.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=2,
                             pad_token_id=0)[0, ids.size(1):].tolist()  # fmt: skip
        if 2 in theirs:
            theirs = theirs[: theirs.index(2)]
        assert ours == theirs


def test_config_ids_and_record(llama):
    hf, _, run = llama
    loaded = load_model(run, "cpu")
    c, model = loaded.config, loaded.model
    assert (c.num_heads, c.num_kv_heads, c.d_ff, c.num_layers, c.max_len) == (4, 2, 48, 2, 64)
    assert (c.positions, c.norm, c.activation, c.bias, c.rope_theta) == (
        "rotary", "rmsnorm", "swiglu", False, 500.0)  # fmt: skip
    tied = hf.config.tie_word_embeddings
    assert c.tie_embeddings is tied and (model.lm_head.weight is model.embed.tokens.weight) is tied
    # BOS and EOS are the file's; no pad id: the unknown token <|endoftext|> pads.
    assert (c.pad_id, c.bos_id, c.eos_id) == (0, 1, 2)
    record = read_import_record(run)
    assert (record["format"], record["model_type"], record["family"]) == (
        "hf", "llama", "decoder_only")  # fmt: skip


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 500.0}}, "rope_parameters"),
        ({"attention_bias": True}, "attention_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"head_dim": 16}, "head_dim"),
    ],
)
def test_what_attnkit_cannot_express_is_one_line(tmp_path, capsys, override, field):
    src = tmp_path / "hf"
    model, tok = random_llama(tied=True)
    model.save_pretrained(src, safe_serialization=True)
    tok.save_pretrained(src)
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, **override}))
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["import", "--from", "hf", str(src), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config.json" in err and field in err, err
    assert not out.exists()
