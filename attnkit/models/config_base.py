"""What every model family's config shares: presets, JSON round trips, and the
fields of the attention-stack families.

Each family is one frozen dataclass (``TransformerConfig``, ``RNNSeq2SeqConfig``,
``DecoderOnlyConfig``, ``EncoderOnlyConfig``). ``ModelConfig`` gives it presets
and (de)serialisation; ``attnkit.validation`` checks every field against its
annotation, so variants are ``Literal`` strings whose choices the type itself
lists. A checkpoint's ``config.json`` is ``to_dict()``: the fields plus
``"family"``, which ``attnkit.models.registry`` dispatches on.

``AttentionStackConfig`` holds the fields that the Transformer-style families
(encoder-decoder, decoder-only, encoder-only) share and that the shared
builders (``attnkit.models.builders``) read; a family changes their defaults
by redeclaring them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal, Self

from attnkit import jsonio
from attnkit.errors import ConfigError
from attnkit.validation import at_least, check_fields, choices, from_mapping, in_range, require

# Variant names (strings, not class flags), shared by the attention-stack families.
# "gelu_tanh" is GPT-2's tanh approximation; "swiglu" a gated FFN (gate, up, down);
# "gated_gelu" the same gated FFN with the tanh GELU (GEGLU, T5 v1.1's "gated-gelu").
Activation = Literal["relu", "gelu", "gelu_tanh", "swiglu", "gated_gelu"]
GATED_ACTIVATIONS = ("swiglu", "gated_gelu")
NormPosition = Literal["post", "pre"]
Norm = Literal["layernorm", "rmsnorm"]
# Absolute: sinusoidal (the paper's), learned; "relative" is Shaw et al. (2018) alone,
# "<absolute>+relative" adds both; "rotary" (RoPE, Su et al. 2021) and "alibi"
# (Press et al. 2022) live inside self-attention, and so does "t5_relative" (T5's
# bucketed scalar bias, Raffel et al. 2020, one table per stack); "none": no positions.
Positions = Literal[
    "sinusoidal", "learned", "relative", "sinusoidal+relative", "learned+relative",
    "rotary", "alibi", "t5_relative", "none",
]  # fmt: skip
# Positions that live inside self-attention only (no absolute table, no Shaw terms).
ATTENTION_POSITIONS = ("rotary", "alibi", "t5_relative")
# Score functions that fit multi-head attention (attnkit.attention.scores.KEY_SCORES).
AttentionScore = Literal["scaled_dot", "dot", "general", "additive"]
# Self-attention over: every key ("dense"), a sliding window plus global tokens
# ("local", Longformer-style), or linear attention (Katharopoulos et al. 2020).
AttentionKind = Literal["dense", "local", "linear"]
FFNKind = Literal["dense", "moe"]

ACTIVATIONS: tuple[str, ...] = choices(Activation)
NORM_POSITIONS: tuple[str, ...] = choices(NormPosition)
POSITIONS: tuple[str, ...] = choices(Positions)
ATTENTION_SCORES: tuple[str, ...] = choices(AttentionScore)


class ModelConfig:
    """Mixin for a family's frozen config dataclass: presets and JSON.

    Subclasses set ``family`` and ``presets`` (name -> field overrides, data).
    """

    family: ClassVar[str]
    presets: ClassVar[Mapping[str, Mapping[str, object]]] = {}

    @classmethod
    def from_preset(cls, name: str, **overrides: object) -> Self:
        """A preset's fields, then ``overrides``, validated."""
        if name not in cls.presets:
            raise ConfigError(
                f"preset: unknown preset {name!r}; choose from {', '.join(cls.presets)}"
            )
        return cls.from_dict({**cls.presets[name], **overrides})

    def replace(self, **changes: object) -> Self:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def to_dict(self) -> dict[str, object]:
        """The fields as JSON has them (tuples as lists), with the family."""
        fields = dataclasses.asdict(self)  # type: ignore[call-overload]
        return {"family": self.family, **{k: _as_json(v) for k, v in fields.items()}}

    def to_json(self) -> str:
        return jsonio.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Self:
        """Fields from a mapping; an unknown key is named with the closest known one."""
        data = dict(data)
        family = data.pop("family", cls.family)
        if family != cls.family:
            raise ConfigError(f"family: this is a {family!r} config, not a {cls.family!r} one")
        return from_mapping(cls, data)

    @classmethod
    def from_json(cls, text: str) -> Self:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"config: invalid JSON ({e})") from None
        if not isinstance(data, dict):
            raise ConfigError("config: expected a JSON object")
        return cls.from_dict(data)


def check_special_ids(specials: Mapping[str, int], vocab_sizes: Mapping[str, int]) -> None:
    """Special ids are non-negative and distinct, and every vocabulary holds them all.

    ``specials``: field name -> id (``{"pad_id": 0, ...}``); ``vocab_sizes``:
    field name -> size. Errors name the field.
    """
    for name, value in specials.items():
        require(name, value >= 0, f"must be >= 0, got {value}")
    if len(set(specials.values())) != len(specials):
        first = next(iter(specials))
        raise ConfigError(f"{first}: {', '.join(specials)} must differ, got {dict(specials)}")
    needed = max(specials.values()) + 1
    for name, size in vocab_sizes.items():
        require(
            name,
            size >= needed,
            f"{size} is too small for the special tokens (ids up to {needed - 1}); "
            f"it must be >= {needed}",
        )


@dataclass(frozen=True)
class AttentionStackConfig(ModelConfig):
    """Fields of every attention-stack family. Defaults are the paper's base model.

    Subclasses add their own fields and checks (``_check_family``) and may
    redeclare a field to change its default (GPT-style models are pre-LN).
    """

    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation: Activation = "relu"
    norm_position: NormPosition = "post"
    norm: Norm = "layernorm"
    norm_eps: float = 1e-5
    positions: Positions = "sinusoidal"
    max_relative_position: int = 16  # k of Shaw et al.; used by the "relative" variants
    rope_theta: float = 10000.0  # the base of the rotary frequencies
    relative_buckets: int = 32  # "t5_relative": buckets of key - query offsets
    relative_max_distance: int = 128  # "t5_relative": offsets past it share the last bucket
    attention_score: AttentionScore = "scaled_dot"  # every attention sublayer's score
    num_kv_heads: int | None = None  # grouped-query attention; None: = num_heads
    # d_k, a head's query/key size, below d_model / num_heads (the paper's Table 3, row B;
    # values keep d_model / num_heads); None: d_model / num_heads
    key_dim: int | None = None
    bias: bool = True  # biases in the attention and FFN projections
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model) (§3.4)
    embedding_norm: bool = False  # a norm after the input embedding (BERT)
    attention: AttentionKind = "dense"  # self-attention's reach
    attention_window: int = 256  # "local": keys in the window
    global_tokens: int = 0  # "local": the first n tokens attend and are attended globally
    ffn: FFNKind = "dense"
    num_experts: int = 4  # "moe": experts per MoE layer
    moe_top_k: int = 2  # "moe": experts per token (1: Switch)
    capacity_factor: float | None = None  # "moe": None drops nothing
    moe_every: int = 1  # "moe": every n-th layer's FFN is a mixture (the last of each n)
    moe_loss_weight: float = 0.01  # the Switch load-balancing loss's weight
    z_loss_weight: float = 0.001  # the router z-loss's weight
    max_len: int = 1024  # positions (the context length of a decoder-only model)

    def __post_init__(self) -> None:
        check_fields(self)
        at_least(self, ("d_model", "num_heads", "d_ff", "max_len", "max_relative_position"), 1)
        at_least(self, ("attention_window", "num_experts", "moe_top_k", "moe_every"), 1)
        at_least(self, ("relative_buckets",), 2)
        at_least(self, ("global_tokens",), 0)
        require(
            "d_model",
            self.d_model % self.num_heads == 0,
            f"{self.d_model} is not divisible by num_heads={self.num_heads}",
        )
        self._check_variants()
        require(
            "d_model",
            self.absolute_positions != "sinusoidal" or self.d_model % 2 == 0,
            f"sinusoidal positions need an even d_model, got {self.d_model}",
        )
        for name in ("dropout", "attention_dropout"):
            in_range(name, getattr(self, name), 0.0, 1.0)
        require(
            "attention_score",
            not self.relative_positions or self.attention_score in ("scaled_dot", "dot"),
            f"relative positions need a dot-product score, got {self.attention_score!r}",
        )
        self._check_family()

    def _check_variants(self) -> None:
        """Combinations of the variant strings that cannot work together."""
        kv = self.kv_heads
        require("num_kv_heads", kv >= 1 and self.num_heads % kv == 0,
                f"{kv} must divide num_heads={self.num_heads}")  # fmt: skip
        if self.key_dim is not None:
            require("key_dim", 1 <= self.key_dim <= self.head_dim,
                    f"must be between 1 and d_model / num_heads = {self.head_dim}, "
                    f"got {self.key_dim}")  # fmt: skip
            require("key_dim", self.attention_score == "scaled_dot" and self.attention == "dense"
                    and not self.relative_positions and self.positions != "rotary",
                    "a key size of its own needs attention_score=scaled_dot, dense attention "
                    "and no relative or rotary positions")  # fmt: skip
        require("rope_theta", self.rope_theta > 0, f"must be > 0, got {self.rope_theta}")
        require("norm_eps", self.norm_eps > 0, f"must be > 0, got {self.norm_eps}")
        require(
            "d_model",
            self.positions != "rotary" or self.head_dim % 2 == 0,
            f"rotary positions need an even head dim, got {self.head_dim}",
        )
        require(
            "attention_score",
            self.positions not in ATTENTION_POSITIONS
            or self.attention_score in ("scaled_dot", "dot"),
            f"{self.positions} positions need a dot-product score, got {self.attention_score!r}",
        )
        if self.positions == "t5_relative":
            require("relative_max_distance",
                    self.relative_max_distance >= self.relative_buckets // 2,
                    f"{self.relative_max_distance} is less than half of "
                    f"relative_buckets={self.relative_buckets}")  # fmt: skip
            require(
                "attention",
                self.attention == "dense",
                f"t5_relative positions need dense attention, got {self.attention!r}",
            )
        if self.attention == "linear":
            plain = self.attention_score == "scaled_dot" and self.kv_heads == self.num_heads
            require("attention", plain and self.positions in ("sinusoidal", "learned"),
                    "linear attention has no score matrix: it needs attention_score=scaled_dot, "
                    "no num_kv_heads and absolute (sinusoidal or learned) positions")  # fmt: skip
        require(
            "attention",
            self.attention != "local" or not self.relative_positions,
            "local attention needs absolute, rotary or alibi positions, not relative ones",
        )
        require(
            "moe_top_k",
            self.moe_top_k <= self.num_experts,
            f"{self.moe_top_k} is more than num_experts={self.num_experts}",
        )
        if self.capacity_factor is not None:
            require("capacity_factor", self.capacity_factor > 0,
                    f"must be > 0 (or null: no limit), got {self.capacity_factor}")  # fmt: skip
        for name in ("moe_loss_weight", "z_loss_weight"):
            require(name, getattr(self, name) >= 0, f"must be >= 0, got {getattr(self, name)}")

    def _check_family(self) -> None:
        """The family's own checks (layer counts, vocabularies, special ids)."""

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads (grouped-query attention when fewer than ``num_heads``)."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def absolute_positions(self) -> str:
        """``"sinusoidal"``, ``"learned"`` or ``"none"`` (relative, rotary, alibi)."""
        if self.positions in (*ATTENTION_POSITIONS, "none"):
            return "none"
        absolute = self.positions.removesuffix("relative").removesuffix("+")
        return absolute or "none"

    @property
    def relative_positions(self) -> bool:
        """Whether self-attention has Shaw-style relative position terms."""
        return self.positions.endswith("relative") and self.positions != "t5_relative"


def _as_json(value: object) -> object:
    """``value`` with tuples as lists, as a JSON round trip gives it back."""
    if isinstance(value, tuple | list):
        return [_as_json(v) for v in value]
    return value
