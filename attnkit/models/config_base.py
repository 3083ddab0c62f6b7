"""What every model family's config shares: presets, JSON round trips, field checks.

Each family is one frozen dataclass (``TransformerConfig``, ``RNNSeq2SeqConfig``,
``DecoderOnlyConfig``, ``EncoderOnlyConfig``) that inherits ``ModelConfig``
for its presets and (de)serialisation, and validates its own fields in
``__post_init__``. A checkpoint's ``config.json`` is ``to_dict()``: the fields
plus ``"family"``, which ``attnkit.models.registry`` dispatches on.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from attnkit.errors import ConfigError

# Variant names shared by the Transformer-style families (strings, not class flags).
ACTIVATIONS = ("relu", "gelu")
NORM_POSITIONS = ("post", "pre")
# "relative" is Shaw et al. (2018) alone; "<absolute>+relative" adds both.
POSITIONS = ("sinusoidal", "learned", "relative", "sinusoidal+relative", "learned+relative")


def check_type(name: str, value: Any, kind: type) -> None:
    """Raise ``ConfigError`` naming ``name`` unless ``value`` is a ``kind``.

    ``bool`` is an ``int`` subclass in Python, but ``d_model: true`` is a
    mistake, so it passes only where ``bool`` is asked for; ints pass as floats.
    """
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind is bool:
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, kind) and not isinstance(value, bool)
    if not ok:
        raise ConfigError(f"{name}: expected {kind.__name__}, got {type(value).__name__} {value!r}")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise ``ConfigError`` naming ``name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"{name}: expected one of {', '.join(choices)}; got {value!r}")


class ModelConfig:
    """Mixin for a family's frozen config dataclass: presets and JSON.

    Subclasses set ``family`` and return their presets (name -> field
    overrides) from ``preset_table``.
    """

    family: ClassVar[str]

    @classmethod
    def preset_table(cls) -> Mapping[str, Mapping[str, Any]]:
        raise NotImplementedError

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> Self:
        """A preset's fields, then ``overrides``, validated."""
        presets = cls.preset_table()
        if name not in presets:
            raise ConfigError(f"preset: unknown preset {name!r}; choose from {', '.join(presets)}")
        return cls.from_dict({**presets[name], **overrides})

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
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        for key in data:
            if key not in known:
                hint = difflib.get_close_matches(key, known, n=1)
                did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
                raise ConfigError(f"{key}: unknown field{did_you_mean}")
        return cls(**data)

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
        if value < 0:
            raise ConfigError(f"{name}: must be >= 0, got {value}")
    if len(set(specials.values())) != len(specials):
        first = next(iter(specials))
        raise ConfigError(f"{first}: {', '.join(specials)} must differ, got {dict(specials)}")
    needed = max(specials.values()) + 1
    for name, size in vocab_sizes.items():
        if size < needed:
            raise ConfigError(
                f"{name}: {size} is too small for the special tokens "
                f"(ids up to {needed - 1}); it must be >= {needed}"
            )
