"""Tiny random models of every family, their inputs and outputs, for the adapter tests
(imported by tests/adapters: a module of its own, not conftest, so that the name is unique)."""

from __future__ import annotations

import torch
from torch import nn

from attnkit.models import FAMILIES
from attnkit.models.registry import config_from_preset

SIZES = dict(d_model=32, num_heads=4, d_ff=64, dropout=0.0)
OVERRIDES = {
    "transformer": dict(SIZES, src_vocab_size=50, tgt_vocab_size=50, num_kv_heads=2,
                        num_encoder_layers=1, num_decoder_layers=1),
    "decoder_only": dict(SIZES, vocab_size=50, num_layers=2, ffn="moe", num_experts=2,
                         positions="rotary", norm="rmsnorm", activation="swiglu",
                         num_kv_heads=2),
    "encoder_only": dict(SIZES, vocab_size=51, mask_id=50, num_layers=1),
    "rnn": dict(src_vocab_size=50, tgt_vocab_size=50, hidden_size=32, embed_dim=16),
    "vit": dict(SIZES, num_layers=1, image_size=8, patch_size=4, channels=1, num_classes=3),
    "swin": dict(image_size=8, patch_size=2, channels=1, num_classes=3, embed_dim=16,
                 depths=(1, 1), num_heads=(2, 2), window_size=2, dropout=0.0),
}  # fmt: skip
IMAGE_FAMILIES = ("vit", "swin")
# Every role each family has (an RNN's attention has no value projection and no FFN).
ALL_ROLES = {name: ("q", "k", "o") if name == "rnn" else ("q", "k", "v", "o", "ffn")
             for name in OVERRIDES}  # fmt: skip


def make_model(name: str, seed: int = 0) -> nn.Module:
    """A tiny random model of family ``name``, in eval mode (no dropout)."""
    torch.manual_seed(seed)
    preset = "digits" if name in IMAGE_FAMILIES else "small"
    model = FAMILIES[name].model_class(config_from_preset(name, preset, **OVERRIDES[name]))
    if name in IMAGE_FAMILIES:
        nn.init.normal_(model.head.weight)  # a zero head would hide any difference
    return model.eval()


def model_inputs(name: str) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    if name in IMAGE_FAMILIES:
        return (torch.rand(2, 1, 8, 8, generator=g),)
    ids = torch.randint(3, 50, (2, 7), generator=g)
    return (ids, ids[:, :5]) if name in ("transformer", "rnn") else (ids,)


def model_output(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    out = model(*inputs)
    if isinstance(out, torch.Tensor):
        return out
    return out.mlm_logits if hasattr(out, "mlm_logits") else out.logits
