"""Swin Transformer (Liu et al., 2021, "Hierarchical Vision Transformer using Shifted Windows").

Where ViT attends over every patch (``O(N^2)`` in the number of patches), Swin
attends inside ``M x M`` windows (``O(N M^2)``) and builds a hierarchy:

* patch partition: ``P x P`` patches projected to ``C`` channels (``PatchEmbedding``,
  the same linear map as ViT's, then LayerNorm);
* stages of Swin blocks, each a pre-norm residual pair of (shifted-)window
  attention (``attnkit.attention.windows``) and an MLP; every second block of a
  stage shifts its windows by ``M // 2`` (§3.2);
* patch merging between stages: each ``2 x 2`` group of tokens is concatenated
  (``4C``), normalised and projected to ``2C`` (§3.1): half the resolution,
  twice the channels, like a CNN's feature pyramid;
* a final LayerNorm, the mean over the last stage's tokens, a linear head.

A stage whose grid is no larger than the window attends over the whole grid
(the window shrinks to the grid) and never shifts, as in the paper's code.

Shapes: ``B`` batch, ``C`` channels (of the image, then of a stage), ``H``/``W``
size (image, then token grid), ``K`` classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

from attnkit.attention.windows import WindowAttention
from attnkit.blocks.feedforward import FeedForward
from attnkit.models import builders
from attnkit.models.config_base import ModelConfig
from attnkit.models.vit import PatchEmbedding
from attnkit.validation import at_least, check_fields, in_range, require

SWIN_PRESETS: dict[str, dict[str, object]] = {
    # scikit-learn's 8x8 digits: 2x2 patches, a 4x4 grid in windows of 2 (4 of them,
    # shifted every other block), then one 2x2 stage that sees the whole grid. (One-pixel
    # patches learn far slower: a grey pixel times a fixed vector carries little.)
    "digits": {
        "image_size": 8, "patch_size": 2, "channels": 1, "num_classes": 10,
        "embed_dim": 32, "depths": (2, 2), "num_heads": (2, 4), "window_size": 2,
        "dropout": 0.1,
    },
    # scikit-image's faces / non-faces, resized to 24x24: 2x2 patches, a 12x12 grid
    # in windows of 6, then 6x6 and 3x3 stages.
    "lfw": {
        "image_size": 24, "patch_size": 2, "channels": 1, "num_classes": 2,
        "embed_dim": 32, "depths": (2, 2, 2), "num_heads": (2, 4, 8), "window_size": 6,
        "dropout": 0.1,
    },
    # Swin-T (the paper's Table 1, ImageNet 224x224).
    "swin_t": {
        "image_size": 224, "patch_size": 4, "channels": 3, "num_classes": 1000,
        "embed_dim": 96, "depths": (2, 2, 6, 2), "num_heads": (3, 6, 12, 24), "window_size": 7,
    },
}  # fmt: skip


@dataclass(frozen=True)
class SwinConfig(ModelConfig):
    """A Swin Transformer for square images (``image_size`` x ``image_size``).

    ``depths[i]`` blocks and ``num_heads[i]`` heads in stage ``i``; stage ``i``
    has ``embed_dim * 2**i`` channels on a grid of ``image_size / patch_size / 2**i``.
    """

    family: ClassVar[str] = "swin"
    presets: ClassVar[dict[str, dict[str, object]]] = SWIN_PRESETS

    image_size: int = 8
    patch_size: int = 1
    channels: int = 1
    num_classes: int = 10
    embed_dim: int = 32
    depths: tuple[int, ...] = (2, 2)
    num_heads: tuple[int, ...] = (2, 4)
    window_size: int = 4
    mlp_ratio: float = 4.0
    dropout: float = 0.0
    attention_dropout: float = 0.0
    # LayerNorm after the patch projection (the paper's code). Off for one-pixel grey
    # patches: the norm of a scalar times a fixed vector keeps only its sign.
    patch_norm: bool = True
    class_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_fields(self)
        at_least(self, ("image_size", "patch_size", "channels", "num_classes", "embed_dim"), 1)
        at_least(self, ("window_size",), 1)
        in_range("dropout", self.dropout, 0.0, 1.0)
        in_range("attention_dropout", self.attention_dropout, 0.0, 1.0)
        require("mlp_ratio", self.mlp_ratio > 0, f"must be > 0, got {self.mlp_ratio}")
        require("depths", len(self.depths) >= 1 and min(self.depths) >= 1,
                f"one or more stages of >= 1 blocks, got {self.depths}")  # fmt: skip
        require("num_heads", len(self.num_heads) == len(self.depths),
                f"{len(self.num_heads)} entries for {len(self.depths)} stages")  # fmt: skip
        require("patch_size", self.image_size % self.patch_size == 0,
                f"{self.patch_size} does not divide image_size={self.image_size}")  # fmt: skip
        for stage, heads in enumerate(self.num_heads):
            width = self.stage_dim(stage)
            require("num_heads", heads >= 1 and width % heads == 0,
                    f"{heads} heads do not divide stage {stage}'s {width} channels")  # fmt: skip
            grid = self.stage_grid(stage)
            if stage + 1 < len(self.depths):
                require("depths", grid % 2 == 0,
                        f"stage {stage}'s {grid}x{grid} grid cannot be merged 2x2 for the "
                        "next stage (fewer stages or another image/patch size)")  # fmt: skip
            window = self.stage_window(stage)
            require("window_size", grid % window == 0,
                    f"{window} does not divide stage {stage}'s {grid}x{grid} grid")  # fmt: skip
        require("class_names", not self.class_names or len(self.class_names) == self.num_classes,
                f"{len(self.class_names)} names for num_classes={self.num_classes}")  # fmt: skip

    def stage_dim(self, stage: int) -> int:
        return self.embed_dim << stage  # doubled at every merge

    def stage_grid(self, stage: int) -> int:
        return self.image_size // self.patch_size >> stage  # halved at every merge

    def stage_window(self, stage: int) -> int:
        """The window of stage ``stage``: the configured one, or the grid when smaller."""
        return min(self.window_size, self.stage_grid(stage))

    @property
    def d_model(self) -> int:
        """The first stage's width (what the paper's warm-up schedule scales by)."""
        return self.embed_dim

    @property
    def num_patches(self) -> int:
        return self.stage_grid(0) ** 2

    @property
    def seq_len(self) -> int:
        """Tokens per image in the first (largest) stage: what a batch's size is counted in."""
        return self.num_patches


class SwinBlock(nn.Module):
    """Pre-norm (shifted-)window attention and MLP, each in a residual (eq. 3)."""

    def __init__(self, dim: int, num_heads: int, window: int, shift: int, config: SwinConfig):
        super().__init__()
        self.shift = shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, num_heads, window, config.attention_dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = FeedForward(dim, int(dim * config.mlp_ratio), activation="gelu")
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """``(B, H, W, C)`` -> ``(B, H, W, C)`` and the window weights on request."""
        out, weights = self.attn(self.norm1(x), self.shift, need_weights=need_weights)
        x = x + self.dropout(out)
        return x + self.dropout(self.mlp(self.norm2(x))), weights


class PatchMerging(nn.Module):
    """``(B, H, W, C)`` -> ``(B, H/2, W/2, 2C)``: concatenate 2x2 neighbours, norm, project."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        # The paper's order: (even row, even col), (odd, even), (even, odd), (odd, odd),
        # i.e. column parity outer, row parity inner: one permuted copy, whose backward
        # is one copy too (the paper's four strided slices and a cat backpropagate
        # through four zero-filled full-size tensors).
        b, h, w, c = x.shape
        groups = x.reshape(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 4, 2, 5)
        merged: Tensor = self.reduction(self.norm(groups.reshape(b, h // 2, w // 2, 4 * c)))
        return merged


@dataclass
class SwinOutput:
    """``logits`` ``(B, K)``; ``hidden`` ``(B, H', W', C')`` the last stage (before its norm);
    ``attentions``: per block ``(B, nW, h, n, n)`` window weights, only on request;
    ``moe`` is always ``None`` (the image task reads it; Swin has no mixture of experts)."""

    logits: Tensor
    hidden: Tensor
    attentions: list[Tensor] | None = None
    moe: None = None


class SwinTransformer(nn.Module):
    """Patch partition, stages of Swin blocks joined by patch merging, mean pool, head."""

    def __init__(self, config: SwinConfig):
        super().__init__()
        c = self.config = config
        self.patch_embed = PatchEmbedding(c.patch_size, c.channels, c.embed_dim)
        self.embed_norm = nn.LayerNorm(c.embed_dim) if c.patch_norm else nn.Identity()
        self.dropout = nn.Dropout(c.dropout)
        # Stage s's blocks are stages[s]; a flat list of them (what `blocks` returns and
        # the attention maps are indexed by) follows the same order.
        self.stages = nn.ModuleList()
        self.merges = nn.ModuleList()
        self._blocks: list[tuple[int, SwinBlock]] = []
        for stage, (depth, heads) in enumerate(zip(c.depths, c.num_heads)):
            dim, window = c.stage_dim(stage), c.stage_window(stage)
            shift = window // 2 if window < c.stage_grid(stage) else 0
            blocks = [SwinBlock(dim, heads, window, shift if i % 2 else 0, c) for i in range(depth)]
            self.stages.append(nn.ModuleList(blocks))
            self._blocks += [(stage, block) for block in blocks]
            if stage + 1 < len(c.depths):
                self.merges.append(PatchMerging(dim))
        self.norm = nn.LayerNorm(c.stage_dim(len(c.depths) - 1))
        self.head = nn.Linear(c.stage_dim(len(c.depths) - 1), c.num_classes)
        # attnkit's image models' init (ViT's too): Xavier-uniform projections, zero biases
        # (the paper's N(0, 0.02) suits its widths of 96 and more, not a width of 8 or 32);
        # the bias tables keep their N(0, 0.02). A zero head starts every class equal.
        builders.init_weights(self, self.head, tied=True, d_model=c.embed_dim)
        # Swin has no absolute positions, so with a zero bias a black patch would be an
        # exactly zero token, and LayerNorm at a zero vector multiplies its gradient by
        # 1/sqrt(eps) ~ 316 per norm: a black image (lfw_subset has an almost black one)
        # blew the gradient up to 1e33. The paper's strided conv keeps PyTorch's uniform
        # bias, which is what the patch projection gets here.
        bound = 1.0 / (self.patch_embed.proj.in_features**0.5)
        nn.init.uniform_(self.patch_embed.proj.bias, -bound, bound)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, images: Tensor, need_weights: bool = False) -> SwinOutput:
        """Classify ``images`` ``(B, C, H, W)``; window attention maps only on request."""
        c = self.config
        expected = (c.channels, c.image_size, c.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"images: expected (B, {', '.join(map(str, expected))}), got {tuple(images.shape)}"
            )
        grid = c.stage_grid(0)
        x = self.embed_norm(self.patch_embed(images)).view(images.size(0), grid, grid, -1)
        x = self.dropout(x)
        attentions: list[Tensor] = []
        for index, (stage, block) in enumerate(self._blocks):
            x, weights = block(x, need_weights=need_weights)
            if weights is not None:
                attentions.append(weights)
            last_of_stage = index + 1 == len(self._blocks) or self._blocks[index + 1][0] != stage
            if last_of_stage and stage < len(self.merges):
                x = self.merges[stage](x)
        pooled = self.norm(x).mean(dim=(1, 2))
        return SwinOutput(self.head(pooled), x, attentions if need_weights else None)

    def blocks(self) -> list[tuple[int, SwinBlock]]:
        """``(stage, block)`` of every block in order: what attention maps are indexed by."""
        return list(self._blocks)

    def num_parameters(self) -> int:
        """Trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
