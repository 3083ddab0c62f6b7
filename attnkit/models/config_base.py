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
from typing import Any, ClassVar, Literal, Self

from attnkit.errors import ConfigError
from attnkit.validation import at_least, check_fields, choices, from_mapping, in_range, require

# Variant names (strings, not class flags), shared by the attention-stack families.
Activation = Literal["relu", "gelu"]
NormPosition = Literal["post", "pre"]
# "relative" is Shaw et al. (2018) alone; "<absolute>+relative" adds both.
Positions = Literal["sinusoidal", "learned", "relative", "sinusoidal+relative", "learned+relative"]
# Score functions that fit multi-head attention (attnkit.attention.scores.KEY_SCORES).
AttentionScore = Literal["scaled_dot", "dot", "general", "additive"]

ACTIVATIONS: tuple[str, ...] = choices(Activation)
NORM_POSITIONS: tuple[str, ...] = choices(NormPosition)
POSITIONS: tuple[str, ...] = choices(Positions)
ATTENTION_SCORES: tuple[str, ...] = choices(AttentionScore)


class ModelConfig:
    """Mixin for a family's frozen config dataclass: presets and JSON.

    Subclasses set ``family`` and ``presets`` (name -> field overrides, data).
    """

    family: ClassVar[str]
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> Self:
        """A preset's fields, then ``overrides``, validated."""
        if name not in cls.presets:
            raise ConfigError(
                f"preset: unknown preset {name!r}; choose from {', '.join(cls.presets)}"
            )
        return cls.from_dict({**cls.presets[name], **overrides})

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, **dataclasses.asdict(self)}  # type: ignore[call-overload]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
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
    positions: Positions = "sinusoidal"
    max_relative_position: int = 16  # k of Shaw et al.; used by the "relative" variants
    attention_score: AttentionScore = "scaled_dot"  # every attention sublayer's score
    max_len: int = 1024  # positions (the context length of a decoder-only model)

    def __post_init__(self) -> None:
        check_fields(self)
        at_least(self, ("d_model", "num_heads", "d_ff", "max_len", "max_relative_position"), 1)
        require(
            "d_model",
            self.d_model % self.num_heads == 0,
            f"{self.d_model} is not divisible by num_heads={self.num_heads}",
        )
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

    def _check_family(self) -> None:
        """The family's own checks (layer counts, vocabularies, special ids)."""

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def absolute_positions(self) -> str:
        """``"sinusoidal"``, ``"learned"`` or ``"none"`` (relative only)."""
        absolute = self.positions.removesuffix("relative").removesuffix("+")
        return absolute or "none"

    @property
    def relative_positions(self) -> bool:
        """Whether self-attention has Shaw-style relative position terms."""
        return self.positions.endswith("relative")
