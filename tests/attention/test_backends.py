"""Attention backends: the reference one, and installing one in a model's attention modules."""

from __future__ import annotations

import torch

from attnkit.attention import (
    REFERENCE,
    CrossAttention,
    MultiHeadAttention,
    attend,
    prepare_mask,
    use_backend,
)
from attnkit.attention.one_query import OneQueryDecode
from attnkit.models import DecoderOnlyConfig, DecoderOnlyLM, EncoderDecoder, TransformerConfig


def test_the_reference_backend_is_attend_and_reads_a_prepared_mask():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 3, 8, generator=g) for _ in range(3))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)[:, None, None, :]
    want, want_w = attend(q, k, v, mask=mask, need_weights=True)
    out, w = REFERENCE(q, k, v, mask=prepare_mask(mask, q.dtype), need_weights=True)
    assert torch.equal(out, want) and torch.equal(w, want_w)


def test_models_are_built_with_the_reference_and_use_backend_replaces_it_everywhere():
    config = TransformerConfig(
        d_model=16, num_heads=2, d_ff=32, num_encoder_layers=2, num_decoder_layers=2,
        src_vocab_size=20, tgt_vocab_size=20,
    )  # fmt: skip
    model = EncoderDecoder(config)
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention | CrossAttention)]
    assert len(attentions) == 2 + 2 * 2 and all(m.backend is REFERENCE for m in attentions)
    before = dict(model.state_dict())
    backend = OneQueryDecode()
    assert use_backend(model, backend) == 6
    assert all(m.backend is backend for m in attentions)
    assert dict(model.state_dict()).keys() == before.keys()  # an attribute, not a module
    # Linear attention has no softmax to compute: nothing to install there.
    linear = DecoderOnlyLM(DecoderOnlyConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1,
                                             vocab_size=20, attention="linear"))  # fmt: skip
    assert use_backend(linear, backend) == 0
