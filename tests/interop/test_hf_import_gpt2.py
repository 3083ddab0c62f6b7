"""GPT2LMHeadModel checkpoints (random, saved by transformers) into DecoderOnlyLM."""

from __future__ import annotations

import json

import pytest
import torch
from interop_helpers import TEXT, assert_same_logits, byte_level_tokenizer, import_saved

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.decoding.greedy import greedy_search


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def gpt2(request, tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = byte_level_tokenizer()
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                     bos_token_id=eot, eos_token_id=eot,
                     tie_word_embeddings=request.param)  # fmt: skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # GPT-2's init is tiny: make the continuations vary
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model, tok, import_saved(model, tok, tmp_path_factory.mktemp("gpt2") / "hf")


def test_logits_match(gpt2):
    hf, tok, run = gpt2
    assert_same_logits(run, hf, tok, TEXT)


def test_greedy_continuations_match(gpt2):
    hf, tok, run = gpt2
    loaded = load_model(run, "cpu")
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    for text in ["the quick", "a lazy cat", "dog"]:
        ids = torch.tensor([tok(text).input_ids])
        ours = greedy_search(loaded.model, ids, max_len_a=0, max_len_b=12).tokens[0]
        theirs = hf.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=eot,
                             pad_token_id=eot)[0, ids.size(1):].tolist()  # fmt: skip
        if eot in theirs:
            theirs = theirs[: theirs.index(eot)]
        assert ours == theirs


def test_config_and_generate_command(gpt2, capsys):
    _, _, run = gpt2
    c = load_model(run, "cpu").config
    assert (c.norm_position, c.activation, c.positions, c.scale_embeddings) == (
        "pre", "gelu_tanh", "learned", False)  # fmt: skip
    assert len({c.pad_id, c.bos_id, c.eos_id}) == 3
    notes = json.loads((run / "import.json").read_text())["notes"]
    assert any("pad_id" in n for n in notes)
    args = ["generate", "--checkpoint", str(run), "--prompt", "the quick", "--max-new-tokens", "5"]
    assert main(args) == 0
    assert capsys.readouterr().out.startswith("the quick")
