"""Trained models back from disk: a checkpoint (or a run's latest) -> model + tokenizer.

``attnkit translate``, ``evaluate``, ``attention`` and ``generate`` load through
here; training resumes through ``attnkit.training.checkpoint`` directly. Every
failure is a ``CheckpointError`` naming the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnkit.data.tokenizers import Tokenizer, tokenizer_from_json
from attnkit.errors import CheckpointError, ConfigError
from attnkit.models import build_model, config_from_dict
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.training import checkpoint as ckpt


def resolve_device(name: str | torch.device | None = None) -> torch.device:
    """``None``/``"auto"``: CUDA when available, else the CPU; otherwise ``torch.device(name)``."""
    if isinstance(name, torch.device):
        return name
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory, or a run directory (its latest checkpoint)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory not found")
    if (path / ckpt.CONFIG_FILE).exists() or (path / ckpt.MODEL_FILE).exists():
        return path
    latest = ckpt.latest_checkpoint(path)
    if latest is None:
        raise CheckpointError(f"{path}: holds no checkpoint (no config.json, no checkpoints/)")
    return latest


def load_tokenizer(run_or_checkpoint: str | Path) -> Tokenizer | None:
    """The tokenizer saved in a run's latest checkpoint (None if there is none yet)."""
    path = Path(run_or_checkpoint)
    directory = path if (path / ckpt.TOKENIZER_FILE).exists() else ckpt.latest_checkpoint(path)
    if directory is None:
        return None
    return tokenizer_from_json(ckpt.load_checkpoint(directory, load_optimizer=False).tokenizer_json)


def _load(
    path: str | Path,
    device: str | torch.device | None,
    *,
    families: tuple[str, ...],
    config_from: Callable[[dict[str, Any]], Any],
    build: Callable[[Any], torch.nn.Module],
    vocab_field: str,
) -> tuple[Any, Tokenizer]:
    """Shared by the loaders below: config, tokenizer, a vocabulary check, weights."""
    directory = resolve_checkpoint(path)
    state = ckpt.load_checkpoint(directory, load_optimizer=False)
    try:
        config = config_from(state.config)
    except ConfigError as e:
        hint = ckpt.family_hint(state.config, families)
        raise CheckpointError(f"{directory / ckpt.CONFIG_FILE}: {e}{hint}") from None
    if state.tokenizer_json is None:
        raise CheckpointError(f"{directory / ckpt.TOKENIZER_FILE}: missing; cannot read text")
    tokenizer = tokenizer_from_json(state.tokenizer_json)
    # A model may have more rows than the tokenizer has ids (its vocabulary size set
    # larger in the run config), never fewer.
    model_vocab = getattr(config, vocab_field)
    if tokenizer.vocab_size > model_vocab:
        raise CheckpointError(
            f"{directory / ckpt.TOKENIZER_FILE}: vocabulary of {tokenizer.vocab_size} does not "
            f"fit the model's {vocab_field}={model_vocab}; the tokenizer and the weights come "
            "from different runs (use the tokenizer.json saved with them)"
        )
    model = build(config)
    ckpt.load_model_state(model, state.model_state, source=directory / ckpt.MODEL_FILE)
    return model.to(resolve_device(device)).eval(), tokenizer


def load_translation_model(
    path: str | Path, device: str | torch.device | None = None
) -> tuple[torch.nn.Module, Tokenizer]:
    """An encoder-decoder (Transformer or RNN; eval mode) and its tokenizer."""
    return _load(
        path,
        device,
        families=("transformer", "rnn"),
        config_from=config_from_dict,
        build=build_model,
        vocab_field="tgt_vocab_size",
    )


def load_decoder_only(
    path: str | Path, device: str | torch.device | None = None
) -> tuple[DecoderOnlyLM, Tokenizer]:
    """A decoder-only language model (eval mode) and its tokenizer."""
    return _load(
        path,
        device,
        families=("decoder_only",),
        config_from=DecoderOnlyConfig.from_dict,
        build=DecoderOnlyLM,
        vocab_field="vocab_size",
    )
