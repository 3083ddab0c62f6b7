"""Decoder-only LM: causality, KV-cached decoding, sampling/generation, config."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.decoding import beam_search, greedy_search, sample
from attnkit.decoding.generate import generate, stream
from attnkit.errors import ConfigError, UsageError
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig

V = 23


def tiny(**overrides) -> DecoderOnlyLM:
    fields = {"d_model": 32, "num_heads": 4, "d_ff": 64, "num_layers": 2, "vocab_size": V,
              "max_len": 24, "dropout": 0.0, **overrides}  # fmt: skip
    return DecoderOnlyLM(DecoderOnlyConfig.from_preset("small", **fields)).double().eval()


def ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, V, (batch, length), generator=torch.Generator().manual_seed(seed))


def naive_greedy(model: DecoderOnlyLM, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """Argmax continuation by full forward passes on the last ``max_len`` tokens."""
    seq = prompt
    for _ in range(n):
        logits = model(seq[:, -model.config.max_len :]).logits[:, -1]
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    return seq


# -- causality and the KV cache ------------------------------------------------------


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_future_tokens_never_change_earlier_logits(norm_position):
    model = tiny(norm_position=norm_position)
    x = ids(3, 12)
    y = x.clone()
    y[:, 7:] = ids(3, 5, seed=1)
    with torch.no_grad():
        a, b = model(x).logits, model(y).logits
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=0, atol=1e-12)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


@pytest.mark.parametrize(
    ("norm_position", "positions"),
    [
        ("pre", "learned"),
        ("post", "sinusoidal"),
        ("post", "learned"),
        ("pre", "relative"),
        ("post", "sinusoidal+relative"),
    ],
)
def test_cached_steps_equal_the_full_forward(norm_position, positions):
    model = tiny(norm_position=norm_position, positions=positions)
    x = ids(2, 15)
    with torch.no_grad():
        full = model(x).logits
        state = model.start(x[:, :5])  # prefills 4 tokens, keeps x[:, 4] pending
        stepped = []
        logits, state = model.step(torch.full((2,), model.bos_id), state)  # feeds x[:, 4]
        stepped.append(logits)
        for t in range(5, 15):
            logits, state = model.step(x[:, t], state)
            stepped.append(logits)
    assert state.cache.length == 15
    torch.testing.assert_close(torch.stack(stepped, 1), full[:, 4:], rtol=0, atol=1e-10)


def test_attention_maps_are_causal():
    model = tiny()
    with torch.no_grad():
        out = model(ids(2, 6), need_weights=True)
    assert len(out.attentions) == 2
    w = out.attentions[0]
    assert w.shape == (2, 4, 6, 6)
    assert torch.all(w.triu(1) == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 6, dtype=w.dtype))


def test_output_projection_is_tied_unless_asked_not_to():
    tied, untied = tiny(), tiny(tie_embeddings=False)
    assert tied.lm_head.weight is tied.embed.tokens.weight
    assert untied.lm_head.weight is not untied.embed.tokens.weight
    assert untied.num_parameters() == tied.num_parameters() + V * 32


# -- the stepping protocol with attnkit.decoding ---------------------------------------


def test_greedy_search_continues_a_prompt():
    model = tiny()
    prompt = ids(3, 4)
    result = greedy_search(model, prompt, max_len_a=0.0, max_len_b=8)
    expected = naive_greedy(model, prompt, 8)[:, 4:].tolist()
    for got, want in zip(result.tokens, expected):
        assert got == want[: len(got)]
        if len(got) < 8:  # stopped at EOS
            assert want[len(got)] == model.eos_id


def test_beam_search_follows_reordered_states():
    model = tiny()
    prompt = ids(2, 3)
    one = beam_search(model, prompt, beam_size=1, max_len_a=0.0, max_len_b=6)
    assert one.tokens == greedy_search(model, prompt, max_len_a=0.0, max_len_b=6).tokens
    four = beam_search(model, prompt, beam_size=4, alpha=0.0, max_len_a=0.0, max_len_b=6)
    for row, (tokens, score) in enumerate(zip(four.tokens, four.scores)):
        # The score of the best beam is its teacher-forced log-prob: the cache
        # and the pending prompt token followed the beams through reorder().
        target = tokens + ([model.eos_id] if len(tokens) < 6 else [])
        seq = torch.cat([prompt[row], torch.tensor(target)])[None]
        with torch.no_grad():
            logp = torch.log_softmax(model(seq).logits[0, 2:-1], dim=-1)
        expected = logp.gather(1, torch.tensor(target)[:, None]).sum()
        assert score == pytest.approx(float(expected), abs=1e-9)


def test_sample_with_a_seed_is_reproducible():
    model = tiny()
    prompt = ids(4, 3)

    def draw(seed):
        generator = torch.Generator().manual_seed(seed)
        return sample(model, prompt, max_len_a=0.0, max_len_b=10, generator=generator)

    assert draw(5) == draw(5)
    assert draw(5).tokens != draw(6).tokens


# -- generate / stream ---------------------------------------------------------------


def test_generate_with_a_seed_is_reproducible_and_seeds_differ():
    model = tiny()
    prompt = ids(2, 3)

    def run(seed):
        return generate(model, prompt, 20, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(1), run(1))
    assert not torch.equal(run(1), run(2))


@pytest.mark.parametrize("options", [{"top_k": 1}, {"temperature": 0.0}, {"top_p": 1e-9}])
def test_top_k_1_is_the_argmax_continuation(options):
    model = tiny()
    prompt = ids(2, 5)
    out = generate(model, prompt, 12, generator=torch.Generator().manual_seed(0), **options)
    torch.testing.assert_close(out, naive_greedy(model, prompt, 12))


def test_past_the_context_the_window_slides_like_nanogpt():
    model = tiny(max_len=8)
    prompt = ids(1, 5)
    out = generate(model, prompt, 15, temperature=0.0)
    assert out.shape == (1, 20)
    torch.testing.assert_close(out, naive_greedy(model, prompt, 15))
    long_prompt = ids(1, 11)  # longer than the context: cropped to the last 8
    torch.testing.assert_close(
        generate(model, long_prompt, 4, temperature=0.0), naive_greedy(model, long_prompt, 4)
    )


def test_stream_yields_exactly_max_new_tokens_as_they_come():
    model = tiny()
    prompt = ids(2, 3)
    seen = []
    out = generate(model, prompt, 9, top_k=5, on_token=seen.append)
    assert len(seen) == 9 and all(t.shape == (2,) for t in seen)
    torch.testing.assert_close(torch.stack(seen, 1), out[:, 3:])
    assert len(list(stream(model, prompt, 0))) == 0
    it = stream(model, prompt, 3)
    assert next(it).shape == (2,)  # the first token arrives before the rest are drawn
    assert len(list(it)) == 2
    assert torch.is_grad_enabled()


class EosAfter:
    """A stub stepper: token 5 for ``k`` steps, then EOS (2) for ever."""

    pad_id, bos_id, eos_id = 0, 1, 2
    context_length = 100

    def __init__(self, k: int):
        self.k = k

    def start(self, prompt_ids, *, max_steps=None):
        return {"fed": 0, "rows": prompt_ids.size(0)}

    def step(self, tokens, state):
        state["fed"] += 1
        logits = torch.zeros(state["rows"], 8)
        logits[:, 5 if state["fed"] <= self.k else 2] = 10.0
        return logits, state


def test_stream_stops_after_eos_when_asked():
    prompt = ids(2, 2)
    toks = list(stream(EosAfter(3), prompt, 10, temperature=0.0, eos_id=2))
    assert [int(t[0]) for t in toks] == [5, 5, 5, 2]
    assert len(list(stream(EosAfter(3), prompt, 10, temperature=0.0))) == 10


@pytest.mark.parametrize(
    ("options", "name"),
    [({"temperature": -1.0}, "temperature"), ({"top_k": -1}, "top_k"),
     ({"top_p": 0.0}, "top_p"), ({"max_new_tokens": -2}, "max_new_tokens")],
)  # fmt: skip
def test_bad_generation_options_name_the_option(options, name):
    model = tiny()
    kwargs = {"max_new_tokens": 3, **options}
    with pytest.raises(UsageError, match=name):
        generate(model, ids(1, 2), **kwargs)


# -- config --------------------------------------------------------------------------


def test_config_json_round_trip_and_family():
    c = DecoderOnlyConfig.from_preset("shakespeare_char", vocab_size=69)
    assert (c.num_layers, c.num_heads, c.d_model, c.max_len, c.dropout) == (6, 6, 384, 256, 0.2)
    assert DecoderOnlyConfig.from_json(c.to_json()) == c
    assert json.loads(c.to_json())["family"] == "decoder_only"
    with pytest.raises(ConfigError, match="family"):
        DecoderOnlyConfig.from_dict({**c.to_dict(), "family": "transformer"})


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"d_model": 30, "num_heads": 4}, "d_model"), ({"norm_position": "middle"}, "norm_position"),
     ({"positions": "spiral"}, "positions"), ({"dropout": 1.0}, "dropout"),
     ({"vocab_size": 2}, "vocab_size"), ({"bos_id": 0}, "pad_id"),
     ({"num_layers": 0}, "num_layers"),
     ({"tie_embeddings": 1}, "tie_embeddings"), ({"max_len": True}, "max_len")],
)  # fmt: skip
def test_bad_config_values_name_the_field(changes, field):
    with pytest.raises(ConfigError, match=rf"^{field}:"):
        DecoderOnlyConfig(**changes)


def test_unknown_keys_and_presets_get_suggestions():
    with pytest.raises(ConfigError, match="did you mean 'num_layers'"):
        DecoderOnlyConfig.from_dict({"num_layer": 3})
    with pytest.raises(ConfigError, match="preset: unknown preset 'gpt3'"):
        DecoderOnlyConfig.from_preset("gpt3")


def test_relative_positions_live_in_every_self_attention_and_see_order():
    model = tiny(positions="relative", max_relative_position=4)
    tables = [layer.self_attn.relative_positions for layer in model.layers]
    assert all(t is not None and t.key.shape == (9, model.config.head_dim) for t in tables)
    # No absolute positions: only the relative terms tell "a b" from "b a".
    x = ids(1, 6)
    with torch.no_grad():
        swapped = x.clone()
        swapped[:, [0, 1]] = x[:, [1, 0]]
        assert not torch.allclose(model(x).logits[:, -1], model(swapped).logits[:, -1])
