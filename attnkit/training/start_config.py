"""A run's model config when it starts from a checkpoint (``--init``): the checkpoint's
config with the run's ``model`` section applied where that keeps the architecture
(``config_from_start``), and the keys that never change it (``NON_ARCHITECTURE_KEYS``).
``attnkit.training.warm_start`` uses it; the tasks build their model configs with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

import torch

from attnkit.errors import ConfigError
from attnkit.models.config_base import ModelConfig
from attnkit.models.registry import FAMILIES
from attnkit.validation import suggest

__all__ = ["NON_ARCHITECTURE_KEYS", "config_from_start"]

# Model keys that never change a model's parameters or what they compute, only how
# it trains: a run started from a checkpoint may set them to anything valid.
NON_ARCHITECTURE_KEYS: frozenset[str] = frozenset(
    {
        "dropout",
        "attention_dropout",
        "moe_loss_weight",
        "z_loss_weight",
        "capacity_factor",
        "pooling",  # checked by its effect: ViT's class token is a parameter
    }
)


def _layout(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Parameter and buffer names and shapes of ``config``'s model, built on the meta device."""
    with torch.device("meta"):
        model = FAMILIES[config.family].model_class(config)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def config_from_start(
    init_config: ModelConfig,
    given: Mapping[str, Any],
    *,
    task_fields: Mapping[str, object] | None = None,
    head_fields: Collection[str] = (),
    families: Collection[str] | None = None,
) -> Any:
    """``init_config`` with the run's model section ``given`` applied, where allowed.

    ``given`` is the run's ``model`` mapping as the user wrote it (``family``,
    ``preset`` and fields). A ``preset`` contributes its fields, which the
    explicit ones override. ``task_fields`` are what the task itself derives
    (vocabulary sizes and special ids from the tokenizer, a classifier's classes
    from the data): ``head_fields`` among them take the task's value (the head is
    then rebuilt), the others keep the checkpoint's (its tokenizer is the one the
    task uses). ``families``: the families the task trains. Raises
    ``ConfigError`` naming ``model.<key>``.
    """
    family = init_config.family
    fields = dict(given)
    wanted = fields.pop("family", family)
    if wanted != family:
        raise ConfigError(
            f"model.family: {wanted!r}, but the --init checkpoint is a {family!r} model; "
            "remove it (the architecture comes from the checkpoint)"
        )
    if families is not None and family not in families:
        raise ConfigError(
            f"model.family: this task trains {' or '.join(families)}; the --init checkpoint "
            f"is a {family!r} model"
        )
    cls = type(init_config)
    preset = fields.pop("preset", None)
    if preset is not None:
        if preset not in cls.presets:
            raise ConfigError(f"model.preset: unknown preset {preset!r} of family {family!r}")
        # As when training from scratch: the task's own fields (vocabulary sizes from the
        # tokenizer) override the preset's, and the explicit keys override both.
        overridden = {k: v for k, v in cls.presets[preset].items() if k not in (task_fields or {})}
        fields = {**overridden, **fields}
    current = init_config.to_dict()
    known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    for key in fields:
        if key not in known:
            raise ConfigError(f"model.{key}: unknown key{suggest(key, known, 'model.')}")
    changes: dict[str, object] = {}
    for key, value in fields.items():
        if _same(value, current[key]):
            continue
        if key not in NON_ARCHITECTURE_KEYS and key not in head_fields:
            raise ConfigError(
                f"model.{key}: {value!r} would change the architecture of the --init "
                f"checkpoint ({key}={current[key]!r}); remove it (the architecture comes "
                "from the checkpoint; dropout and other training-only keys may change)"
            )
        changes[key] = value
    for key, value in (task_fields or {}).items():
        # Other task fields follow the tokenizer, which is the checkpoint's own: its
        # values stand (a model may have more rows than its tokenizer has ids).
        if key in head_fields and key not in changes and not _same(value, current[key]):
            changes[key] = value
    if not changes:
        return init_config
    try:
        config = cls.from_dict({**current, **changes})
        kept = {k: v for k, v in changes.items() if k not in head_fields}
        reshaped = bool(kept) and _layout(init_config.replace(**kept)) != _layout(init_config)
    except ConfigError as e:
        raise ConfigError(f"model.{e}") from None
    if reshaped:
        key = next(iter(kept))
        raise ConfigError(
            f"model.{key}: {kept[key]!r} would change the parameters of the --init "
            f"checkpoint ({key}={current[key]!r}); remove it"
        )
    return config


def _same(value: object, current: object) -> bool:
    """Equal as config values (YAML lists stand in for tuples)."""
    if isinstance(value, list | tuple) and isinstance(current, list | tuple):
        return list(value) == list(current)
    return bool(value == current)
