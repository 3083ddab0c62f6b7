"""Stacks hand each layer its own cache view; pre-LN stacks end with a norm."""

from __future__ import annotations

import torch

from attnkit.attention import KVCache
from attnkit.blocks import CausalLayer, Residual, run_causal_layers
from attnkit.models import TransformerConfig, builders


def _config(**kw) -> TransformerConfig:
    return TransformerConfig.from_preset(
        "small", d_model=16, num_heads=2, d_ff=32, num_encoder_layers=2, num_decoder_layers=3,
        src_vocab_size=20, tgt_vocab_size=20, dropout=0.0, **kw,
    )  # fmt: skip


class RecordingCache(KVCache):
    """A growing cache that records which view each update came through."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.updates: list[int] = []

    def update_layer(self, layer, k, v):
        self.updates.append(layer)
        return super().update_layer(layer, k, v)


def test_each_decoder_layer_writes_through_its_own_view():
    torch.manual_seed(0)
    decoder = builders.decoder(_config(), 3).eval()
    cache = RecordingCache(3, 2, 2, 8)
    memory = torch.randn(2, 5, 16)
    kv = [layer.cross_attn.project_kv(memory) for layer in decoder.decoder_layers()]
    cache.set_cross(torch.stack([k for k, _ in kv]), torch.stack([v for _, v in kv]))
    x = torch.randn(2, 1, 16)
    out = decoder(x, None, cache=cache).hidden
    assert cache.updates == [0, 1, 2]  # one write per layer, in order, no index passed in
    want = decoder(x, memory).hidden  # the same step without a cache
    torch.testing.assert_close(out, want)


def test_causal_layers_with_a_cache_equal_the_full_forward():
    torch.manual_seed(0)
    c = _config(norm_position="pre")
    layers = builders.causal_layers(c, 2)
    for layer in layers:
        layer.eval()
    norm = builders.final_norm(c)
    x = torch.randn(2, 6, 16)
    full = run_causal_layers(layers, x, final_norm=norm).hidden
    cache = KVCache(2, 2, 2, 8, capacity=2)
    steps = []
    for t in range(6):
        out = run_causal_layers(layers, x[:, t : t + 1], final_norm=norm, cache=cache).hidden
        cache.advance()
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-6)
    assert all(isinstance(layer, CausalLayer) for layer in layers)


def test_pre_ln_stacks_end_with_a_norm_and_post_ln_stacks_do_not():
    assert builders.encoder(_config(norm_position="pre"), 1).final_norm is not None
    assert builders.encoder(_config(), 1).final_norm is None


def test_the_residual_places_the_norm_by_name():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8)
    double = lambda h: 2 * h  # noqa: E731
    post, pre = Residual(8, 0.0, "post"), Residual(8, 0.0, "pre")
    torch.testing.assert_close(post(x, double)[0], post.norm(x + 2 * x))
    torch.testing.assert_close(pre(x, double)[0], x + 2 * pre.norm(x))
