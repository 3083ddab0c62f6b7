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

The encoder is the shared one (``attnkit.models.builders.encoder``), so
every option of the attention-stack config applies to images too.

Shapes: ``B`` batch, ``C`` channels, ``H``/``W`` image size, ``P`` patch size,
``N`` patches, ``S`` sequence (``N`` or ``N + 1`` with a class token), ``D``
d_model, ``h`` heads, ``K`` classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from attnkit.blocks.moe import MoEAux, merge_aux
from attnkit.models import builders
from attnkit.models.config_base import Activation, AttentionStackConfig, NormPosition, Positions
from attnkit.models.presets import VIT_PRESETS
from attnkit.positions import LearnedPositions, build_positions
from attnkit.roles import Roles
from attnkit.validation import at_least, require

Pooling = Literal["cls", "mean"]


@dataclass(frozen=True)
class ViTConfig(AttentionStackConfig):
    """A Vision Transformer: square images of ``image_size`` cut into ``patch_size`` patches.

    The encoder's options are the shared attention-stack fields (score, norm,
    FFN, mixture of experts, local attention, ...); ``positions`` is
    ``"learned"`` (ViT's), ``"none"`` (a bag of patches), or any other kind
    the stacks take. ``class_names`` names the ``num_classes`` outputs.
    """

    family: ClassVar[str] = "vit"
    presets: ClassVar[dict[str, dict[str, object]]] = VIT_PRESETS

    d_model: int = 64
    num_heads: int = 4
    d_ff: int = 128
    dropout: float = 0.0
    activation: Activation = "gelu"
    norm_position: NormPosition = "pre"
    positions: Positions = "learned"
    image_size: int = 8
    patch_size: int = 4
    channels: int = 1
    num_classes: int = 10
    num_layers: int = 3
    pooling: Pooling = "cls"
    class_names: tuple[str, ...] = ()

    def _check_family(self) -> None:
        at_least(self, ("image_size", "patch_size", "channels", "num_classes", "num_layers"), 1)
        require(
            "patch_size",
            self.image_size % self.patch_size == 0,
            f"{self.patch_size} does not divide image_size={self.image_size}",
        )
        require(
            "max_len",
            self.seq_len <= self.max_len,
            f"{self.max_len} positions, but {self.seq_len} patches (and class token) need more",
        )
        require(
            "class_names",
            not self.class_names or len(self.class_names) == self.num_classes,
            f"{len(self.class_names)} names for num_classes={self.num_classes}",
        )

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def seq_len(self) -> int:
        return self.num_patches + (self.pooling == "cls")


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

    def roles(self) -> Roles:
        """The patch projection is the input embedding (eq. 1's ``E``), not a projection
        of the stream: never a LoRA target, frozen with ``embeddings``."""
        return Roles(parameters={name: "embedding" for name, _ in self.named_parameters()})

    def forward(self, images: Tensor) -> Tensor:
        patches: Tensor = self.proj(patchify(images, self.patch_size))
        return patches


@dataclass
class ViTOutput:
    """What ``VisionTransformer.forward`` returns.

    ``logits`` ``(B, K)``; ``hidden`` ``(B, S, D)``; ``attentions``: per layer
    ``(B, h, S, S)``, only on request; ``moe``: mixture-of-experts report or ``None``.
    """

    logits: Tensor
    hidden: Tensor
    attentions: list[Tensor] | None = None
    moe: MoEAux | None = None


class VisionTransformer(nn.Module):
    """Patch embedding, optional class token, positions, the encoder, a linear head."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        c = self.config = config
        self.patch_embed = PatchEmbedding(c.patch_size, c.channels, c.d_model)
        # ViT's initialisations (timm's vision_transformer): truncated normal, std 0.02.
        self.cls_token = None
        if c.pooling == "cls":
            self.cls_token = nn.Parameter(torch.zeros(1, 1, c.d_model))
            nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.positions = build_positions(c.absolute_positions, c.seq_len, c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        self.encoder = builders.encoder(c, c.num_layers)
        self.head = nn.Linear(c.d_model, c.num_classes)
        builders.init_weights(self, self.head, tied=True, d_model=c.d_model)
        if isinstance(self.positions, LearnedPositions):
            nn.init.trunc_normal_(self.positions.weight, std=0.02)
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
        x = x + self.positions(x.size(1))
        encoded = self.encoder(self.dropout(x), need_weights=need_weights)
        hidden = encoded.hidden
        pooled = hidden[:, 0] if c.pooling == "cls" else hidden.mean(dim=1)
        return ViTOutput(
            logits=self.head(pooled),
            hidden=hidden,
            attentions=encoded.attentions,
            moe=merge_aux(encoded.aux),
        )

    def num_parameters(self) -> int:
        """Trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
