"""Vision Transformer (Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words").

An image ``(C, H, W)`` is cut into ``N = HW / P^2`` non-overlapping ``P x P``
patches, each flattened to ``P^2 C`` values (their eq. 1) and projected to
``D``; a learned class token may go first; learned positions are added; the
paper's Transformer encoder (pre-LN, GELU, as in ViT) reads the sequence; the
class token's output, or the mean over patch outputs, goes to a linear head.

Patches are cut by ``reshape``/``permute`` and projected by an ``nn.Linear``
(``patchify``), not by a strided ``Conv2d``: the two compute the same function
(a conv with kernel = stride = P is this linear map on each patch), the
reshape keeps the flattening order visible and testable (``unpatchify``
inverts it exactly), and a conv checkpoint converts by
``conv.weight.permute(0, 2, 3, 1).reshape(D, P * P * C)``.

The encoder is assembled here from ``attnkit.blocks`` for now; the shared
builders are meant to take it over.

Shapes: ``B`` batch, ``C`` channels, ``H``/``W`` image size, ``P`` patch size,
``N`` patches, ``S`` sequence (``N`` or ``N + 1`` with a class token), ``D``
d_model, ``h`` heads, ``K`` classes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnkit.attention.multihead import MultiHeadAttention
from attnkit.blocks import Encoder, EncoderLayer, FeedForward, Residual
from attnkit.errors import ConfigError
from attnkit.models.config_base import (
    ACTIVATIONS,
    NORM_POSITIONS,
    ModelConfig,
    check_choice,
    check_type,
)

VIT_POOLINGS = ("cls", "mean")
VIT_POSITIONS = ("learned", "none")
_FIELD_TYPES = {"int": int, "float": float, "str": str}

VIT_PRESETS: dict[str, dict[str, Any]] = {
    # scikit-learn's 8x8 digits, CPU-sized (experiments/vit_digits.py).
    "digits": {
        "image_size": 8,
        "patch_size": 4,
        "channels": 1,
        "num_classes": 10,
        "d_model": 64,
        "heads": 4,
        "d_ff": 128,
        "layers": 3,
    },
    # ViT-B/16 (the paper's Table 1) at 224x224, ImageNet's 1000 classes.
    "vit_base_16": {
        "image_size": 224,
        "patch_size": 16,
        "channels": 3,
        "num_classes": 1000,
        "d_model": 768,
        "heads": 12,
        "d_ff": 3072,
        "layers": 12,
    },
}


@dataclass(frozen=True)
class ViTConfig(ModelConfig):
    """A Vision Transformer; square images of ``image_size`` cut into ``patch_size`` patches."""

    family: ClassVar[str] = "vit"

    image_size: int = 8
    patch_size: int = 4
    channels: int = 1
    num_classes: int = 10
    d_model: int = 64
    heads: int = 4
    d_ff: int = 128
    layers: int = 3
    dropout: float = 0.0
    pooling: str = "cls"
    positions: str = "learned"
    activation: str = "gelu"
    norm_position: str = "pre"

    def __post_init__(self) -> None:
        for f in fields(self):
            check_type(f.name, getattr(self, f.name), _FIELD_TYPES[f.type])
        for name in ("image_size", "patch_size", "channels", "num_classes", "d_model"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("heads", "d_ff", "layers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.image_size % self.patch_size != 0:
            raise ConfigError(
                f"patch_size: {self.patch_size} does not divide image_size={self.image_size}"
            )
        if self.d_model % self.heads != 0:
            raise ConfigError(f"d_model: {self.d_model} is not divisible by heads={self.heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout: must be in [0, 1), got {self.dropout}")
        check_choice("pooling", self.pooling, VIT_POOLINGS)
        check_choice("positions", self.positions, VIT_POSITIONS)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("norm_position", self.norm_position, NORM_POSITIONS)

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def seq_len(self) -> int:
        return self.num_patches + (self.pooling == "cls")

    @classmethod
    def preset_table(cls) -> dict[str, dict[str, Any]]:
        return VIT_PRESETS


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """``(B, C, H, W)`` -> ``(B, N, P * P * C)``, patches in row-major order.

    Each patch is flattened as ``(P, P, C)`` (row, column, channel), the paper's
    ``x_p^i`` of eq. 1.
    """
    b, c, h, w = images.shape
    p = patch_size
    if h % p or w % p:
        raise ValueError(f"patch_size: {p} does not divide the image size {h}x{w}")
    x = images.reshape(b, c, h // p, p, w // p, p)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), p * p * c)


def unpatchify(patches: Tensor, patch_size: int, channels: int, height: int) -> Tensor:
    """The inverse of ``patchify``: ``(B, N, P * P * C)`` -> ``(B, C, H, W)``."""
    b, n, _ = patches.shape
    p = patch_size
    rows = height // p
    cols = n // rows
    x = patches.reshape(b, rows, cols, p, p, channels)
    return x.permute(0, 5, 1, 3, 2, 4).reshape(b, channels, rows * p, cols * p)


class PatchEmbedding(nn.Module):
    """``(B, C, H, W)`` -> ``(B, N, D)``: ``patchify`` then one linear map (eq. 1's ``E``)."""

    def __init__(self, patch_size: int, channels: int, d_model: int):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Linear(patch_size * patch_size * channels, d_model)

    def forward(self, images: Tensor) -> Tensor:
        return self.proj(patchify(images, self.patch_size))


@dataclass
class ViTOutput:
    """What ``VisionTransformer.forward`` returns.

    ``logits`` ``(B, K)``; ``hidden`` ``(B, S, D)``; ``attentions``: per layer
    ``(B, h, S, S)``, only on request.
    """

    logits: Tensor
    hidden: Tensor
    attentions: list[Tensor] | None = None


def build_vit_encoder(c: ViTConfig) -> Encoder:
    """The encoder stack from ``attnkit.blocks`` (the shared builders will take this over)."""
    layers = [
        EncoderLayer(
            self_attn=MultiHeadAttention(c.d_model, c.heads, dropout=c.dropout),
            ffn=FeedForward(c.d_model, c.d_ff, c.activation),
            self_attn_residual=Residual(c.d_model, c.dropout, c.norm_position),
            ffn_residual=Residual(c.d_model, c.dropout, c.norm_position),
        )
        for _ in range(c.layers)
    ]
    return Encoder(layers, nn.LayerNorm(c.d_model) if c.norm_position == "pre" else None)


class VisionTransformer(nn.Module):
    """Patch embedding, optional class token, learned positions, encoder, linear head."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        c = self.config = config
        self.patch_embed = PatchEmbedding(c.patch_size, c.channels, c.d_model)
        # ViT's initialisations (timm's vision_transformer): truncated normal, std 0.02.
        self.cls_token = None
        if c.pooling == "cls":
            self.cls_token = nn.Parameter(torch.zeros(1, 1, c.d_model))
            nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.positions = None
        if c.positions == "learned":
            self.positions = nn.Parameter(torch.zeros(1, c.seq_len, c.d_model))
            nn.init.trunc_normal_(self.positions, std=0.02)
        self.dropout = nn.Dropout(c.dropout)
        self.encoder = build_vit_encoder(c)
        self.head = nn.Linear(c.d_model, c.num_classes)
        # A zero head starts every class at the same score (the paper zero-inits
        # the head when fine-tuning; from scratch it is harmless and steadies step 1).
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, images: Tensor, need_weights: bool = False) -> ViTOutput:
        """Classify ``images`` ``(B, C, H, W)``; attention maps only on request."""
        c = self.config
        expected = (c.channels, c.image_size, c.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"images: expected (B, {', '.join(map(str, expected))}), got {tuple(images.shape)}"
            )
        x = self.patch_embed(images)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.size(0), -1, -1), x], dim=1)
        if self.positions is not None:
            x = x + self.positions
        hidden, weights = self.encoder(self.dropout(x), need_weights=need_weights)
        pooled = hidden[:, 0] if c.pooling == "cls" else hidden.mean(dim=1)
        return ViTOutput(logits=self.head(pooled), hidden=hidden, attentions=weights)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
