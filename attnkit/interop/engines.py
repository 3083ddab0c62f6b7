"""The engines behind ``--engine``: a plain registry, and opening one for a checkpoint.

``attnkit`` is the native decoder (the commands' own code, not listed here);
every other name maps to one class (``attnkit.interop.engines_base.EngineClass``)
that checks the options, converts the checkpoint with the existing export
and loads the result. ``open_engine`` does it in that order: a refused option
fails before anything is hashed, converted or loaded; the conversion is
cached beside the checkpoint (``attnkit.interop.engines_cache``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnkit.checkpoints.files import CONFIG_FILE, TOKENIZER_FILE
from attnkit.checkpoints.loading import LoadedModel
from attnkit.checkpoints.rundir import resolve_checkpoint
from attnkit.data.tokenizer_kinds import load_tokenizer
from attnkit.errors import CheckpointError
from attnkit.interop.engines_base import DecodeOptions, Engine, EngineClass, RunOptions, SourceSide
from attnkit.interop.engines_cache import converted_model
from attnkit.interop.engines_ct2 import CTranslate2Engine
from attnkit.interop.engines_onnx import OnnxRuntimeEngine

ENGINES: dict[str, EngineClass] = {
    "ctranslate2": CTranslate2Engine,
    "onnxruntime": OnnxRuntimeEngine,
}
NAMES = ("attnkit", *ENGINES)


def _source_side(checkpoint: Path) -> SourceSide:
    """The tokenizer and ``max_len`` of a checkpoint, read without building the model."""
    import json

    config_file = checkpoint / CONFIG_FILE
    try:
        max_len = int(json.loads(config_file.read_text(encoding="utf-8"))["max_len"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{config_file}: no max_len to read ({e})") from None
    return SourceSide(load_tokenizer(checkpoint / TOKENIZER_FILE), max_len - 1)


def open_engine(
    name: str,
    checkpoint: str | Path,
    run: RunOptions,
    decode: DecodeOptions,
    *,
    load: Callable[[Path], LoadedModel],
    say: Callable[[str], None],
) -> Engine:
    """Engine ``name`` for ``checkpoint`` (a checkpoint or run directory), ready to translate.

    ``load(directory)`` loads the checkpoint on the CPU for a conversion (only
    on a cache miss; it should refuse a family the command does not read);
    ``say`` prints one line on stderr.
    """
    engine = ENGINES[name]
    engine.check(run, decode)
    directory = resolve_checkpoint(checkpoint)
    model_dir = converted_model(directory, engine, lambda: load(directory), say)
    return engine(model_dir, _source_side(directory), run)


__all__ = ["ENGINES", "NAMES", "DecodeOptions", "Engine", "RunOptions", "open_engine"]
