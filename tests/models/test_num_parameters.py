"""``num_parameters()`` of every family counts what training updates: tied matrices once,
frozen parameters (``requires_grad=False``, e.g. a base model under adapters) not at all."""

from __future__ import annotations

import pytest

from attnkit.models import FAMILIES, config_from_preset

SIZES = dict(d_model=16, num_heads=2, d_ff=32)
OVERRIDES = {
    "transformer": dict(SIZES, num_encoder_layers=1, num_decoder_layers=1,
                        src_vocab_size=30, tgt_vocab_size=30),
    "decoder_only": dict(SIZES, vocab_size=30, num_layers=1),
    "encoder_only": dict(SIZES, vocab_size=31, mask_id=30, num_layers=1),
    "rnn": dict(src_vocab_size=30, tgt_vocab_size=30, embed_dim=8, hidden_size=8),
    "vit": dict(SIZES, num_layers=1, image_size=8, patch_size=4, channels=1, num_classes=3),
    "swin": dict(image_size=8, patch_size=2, channels=1, num_classes=3, embed_dim=16,
                 depths=(1, 1), num_heads=(2, 2), window_size=2),
}  # fmt: skip


def test_every_family_is_covered():
    assert set(OVERRIDES) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(OVERRIDES))
def test_frozen_parameters_are_not_counted(family):
    preset = "digits" if family in ("vit", "swin") else "small"
    model = FAMILIES[family].model_class(config_from_preset(family, preset, **OVERRIDES[family]))
    params = list(model.parameters())  # each shared (tied) tensor once
    assert model.num_parameters() == sum(p.numel() for p in params)
    frozen = params[0]
    frozen.requires_grad_(False)
    assert model.num_parameters() == sum(p.numel() for p in params) - frozen.numel()
    model.requires_grad_(False)
    assert model.num_parameters() == 0
