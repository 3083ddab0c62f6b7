"""Batched greedy continuation of prompts of different lengths (``attnkit.decoding.ragged``):
the same token ids as each prompt alone, rows stopping at their own EOS; the summaries
of a decoder-only model the same at any batch size; ``decoding`` never reaching up
into ``inference``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from attnkit.attention.ragged_cache import RaggedKVCache
from attnkit.data.tokenizers import CharTokenizer
from attnkit.decoding.generate import generate
from attnkit.decoding.ragged import continue_prompts, supports_ragged
from attnkit.decoding.static import build_stepper
from attnkit.decoding.summaries import summarize_texts
from attnkit.errors import UsageError
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig

PROMPTS = [[5, 9, 12], [7], [3, 4, 5, 6, 7, 8, 9, 10, 11], [20, 21, 22, 23, 24], [30, 31]]
NEW = 12


def tiny_lm(positions: str = "rotary", **fields: object) -> DecoderOnlyLM:
    torch.manual_seed(0)
    sizes = {"d_model": 32, "num_heads": 4, "d_ff": 64, "num_layers": 2, "vocab_size": 48,
             "max_len": 64, "dropout": 0.0, "positions": positions}  # fmt: skip
    model = DecoderOnlyLM(DecoderOnlyConfig.from_dict({**sizes, **fields})).eval()
    with torch.no_grad():  # an untrained model repeats itself: spread its choices
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return model


def alone(model: DecoderOnlyLM, prompt: list[int], eos: int) -> list[int]:
    """The one-at-a-time path: ``generate`` on the prompt by itself."""
    out = generate(model, torch.tensor([prompt]), NEW, temperature=0.0, eos_id=eos)
    new = out[0, len(prompt) :].tolist()
    return new[: new.index(eos)] if eos in new else new


def an_eos(model: DecoderOnlyLM) -> int:
    """A token some prompt emits after others, and some never: with it as EOS one row
    stops early and one runs to the end."""
    runs = [alone(model, p, eos=-1) for p in PROMPTS]
    for token in sorted({t for run in runs for t in run}):
        stops = [run.index(token) for run in runs if token in run]
        if max(stops) > 0 and len(stops) < len(runs):
            return token
    raise AssertionError(f"no token stops one row and not another: {runs}")


@pytest.mark.parametrize(
    "positions, fields",
    [("rotary", {}), ("learned", {}), ("sinusoidal", {}), ("rotary", {"num_kv_heads": 2})],
)
def test_batched_continuations_are_the_prompts_alone(positions, fields):
    model = tiny_lm(positions, **fields)
    assert supports_ragged(model)
    eos = an_eos(model)
    want = [alone(model, p, eos) for p in PROMPTS]
    assert any(0 < len(w) < NEW for w in want) and max(len(w) for w in want) == NEW
    got = continue_prompts(model, PROMPTS, NEW, eos_id=eos, batch_size=5)
    assert got == want
    # in batches of 2 (sorted by length) and with the CPU's one-query backend installed
    fast = build_stepper(model, one_query=True, cache="model")
    assert continue_prompts(model, PROMPTS, NEW, eos_id=eos, batch_size=2, stepper=fast) == want


def test_a_model_whose_positions_are_shared_goes_one_prompt_at_a_time():
    model = tiny_lm("alibi")
    assert not supports_ragged(model)
    eos = an_eos(model)
    got = continue_prompts(model, PROMPTS, NEW, eos_id=eos, batch_size=5)
    assert got == [alone(model, p, eos) for p in PROMPTS]


def test_the_cache_keeps_each_row_at_its_own_positions():
    cache = RaggedKVCache.allocate(1, 2, 1, 2, capacity=5, dtype=torch.float32, device="cpu")
    cache.set_lengths(torch.tensor([1, 3]))
    assert cache.positions(2).tolist() == [[1, 2], [3, 4]]
    k = torch.arange(8, dtype=torch.float32).view(2, 1, 2, 2)
    keys, _ = cache.update_layer(0, k, k)
    assert keys[0, 0, 1:3].tolist() == [[0, 1], [2, 3]] and keys[1, 0, 3:5].tolist() == [
        [4, 5], [6, 7]]  # fmt: skip
    mask = cache.self_mask(1)[:, 0, 0]
    assert mask.tolist() == [[True, True, False, False, False], [True] * 4 + [False]]
    cache.advance(1)
    assert cache.reorder(torch.tensor([1])).pos.tolist() == [4]


def test_decoder_only_summaries_are_the_same_at_any_batch_size():
    texts = ["gas prices rose again", "", "the meeting moved to noon on friday", "lunch?",
             "please see the contract report and the notes below, thanks"]  # fmt: skip
    tokenizer = CharTokenizer.train(texts + ["Summarize: \n"])
    model = tiny_lm(
        vocab_size=tokenizer.vocab_size,
        max_len=256,
        pad_id=tokenizer.pad_id,
        bos_id=tokenizer.bos_id,
        eos_id=tokenizer.eos_id,
    )
    one = summarize_texts(model, tokenizer, texts, beam=1, max_tokens=8, batch_size=1)
    assert one[1] == "" and all(one[i] for i in (0, 2, 3, 4))
    assert summarize_texts(model, tokenizer, texts, beam=1, max_tokens=8, batch_size=4) == one


def test_prompt_lookup_gives_the_same_summaries_from_drafts(monkeypatch):
    from attnkit.decoding.lookup import NgramDrafter

    texts = ["the gas report and the gas prices", "", "noon on friday, noon on friday"]
    tokenizer = CharTokenizer.train(texts + ["Summarize: \n"])
    model = tiny_lm(vocab_size=tokenizer.vocab_size, max_len=256, pad_id=tokenizer.pad_id,
                    bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id)  # fmt: skip
    want = summarize_texts(model, tokenizer, texts, beam=1, max_tokens=12, batch_size=4)
    drafts = []
    real = NgramDrafter.propose

    def propose(self, ids, k):
        drafts.append(real(self, ids, k))
        return drafts[-1]

    monkeypatch.setattr(NgramDrafter, "propose", propose)
    got = summarize_texts(model, tokenizer, texts, beam=1, max_tokens=12, prompt_lookup=4)
    assert got == want and any(d.tokens for d in drafts)  # drafted, checked, the same text
    with pytest.raises(UsageError, match="prompt_lookup must be >= 0"):
        summarize_texts(model, tokenizer, texts, beam=1, prompt_lookup=-1)


def test_decoding_never_imports_inference():
    root = Path(__file__).resolve().parents[2] / "attnkit" / "decoding"
    reaching = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            reaching += [f"{path.name}: {n}" for n in names if n.startswith("attnkit.inference")]
    assert not reaching, reaching
