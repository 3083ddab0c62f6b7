"""The engines behind ``--engine``: plain registries, and opening one for a checkpoint.

``attnkit`` is the native decoder (the commands' own code, not listed here);
every other name maps to one class that checks the options, converts the
checkpoint with the existing export and loads the result: ``ENGINES`` for
``translate``/``evaluate``/``serve`` (``attnkit.engines.base.EngineClass``),
``GENERATORS`` for ``generate`` (``attnkit.engines.llama_cpp``).
``open_engine`` and ``open_generator`` do it in that order: a refused option
fails before anything is hashed, converted or loaded; the conversion is
cached beside the checkpoint (``attnkit.engines.cache``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnkit.checkpoints.files import CONFIG_FILE, TOKENIZER_FILE
from attnkit.checkpoints.loading import LoadedModel
from attnkit.checkpoints.rundir import resolve_checkpoint
from attnkit.data.tokenizer_kinds import Tokenizer, load_tokenizer
from attnkit.engines.base import DecodeOptions, Engine, EngineClass, RunOptions, SourceSide
from attnkit.engines.cache import converted_model
from attnkit.engines.ctranslate2 import CTranslate2Engine
from attnkit.engines.llama_cpp import LlamaCppEngine, SampleOptions, gguf_file, probe
from attnkit.engines.onnxruntime import OnnxRuntimeEngine
from attnkit.errors import CheckpointError, UsageError

ENGINES: dict[str, EngineClass] = {
    "ctranslate2": CTranslate2Engine,
    "onnxruntime": OnnxRuntimeEngine,
}
NAMES = ("attnkit", *ENGINES)
GENERATORS = {"llama.cpp": LlamaCppEngine}
GENERATOR_NAMES = ("attnkit", *GENERATORS)


def _config_field(checkpoint: Path, field: str) -> object:
    """One field of a checkpoint's ``config.json``, read without building the model."""
    import json

    config_file = checkpoint / CONFIG_FILE
    try:
        return json.loads(config_file.read_text(encoding="utf-8"))[field]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{config_file}: no {field} to read ({e})") from None


def _max_len(checkpoint: Path) -> int:
    max_len = _config_field(checkpoint, "max_len")
    if not isinstance(max_len, int):
        raise CheckpointError(f"{checkpoint / CONFIG_FILE}: max_len is not an integer")
    return max_len


def generator_side(checkpoint: str | Path) -> tuple[Tokenizer, int | None]:
    """A checkpoint's tokenizer and end-of-sequence id, read without building the model."""
    directory = resolve_checkpoint(checkpoint)
    eos_id = _config_field(directory, "eos_id")
    if eos_id is not None and not isinstance(eos_id, int):
        raise CheckpointError(f"{directory / CONFIG_FILE}: eos_id is not an integer")
    return load_tokenizer(directory / TOKENIZER_FILE), eos_id


def _source_side(checkpoint: Path) -> SourceSide:
    """The tokenizer and ``max_len`` of a checkpoint, read without building the model."""
    return SourceSide(load_tokenizer(checkpoint / TOKENIZER_FILE), _max_len(checkpoint) - 1)


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


def open_generator(
    name: str,
    checkpoint: str | Path,
    run: RunOptions,
    tokens: int,
    *,
    load: Callable[[Path], LoadedModel],
    say: Callable[[str], None],
) -> LlamaCppEngine:
    """Generator ``name`` for ``checkpoint``, with room for ``tokens`` (prompt + new ones).

    As ``open_engine``; then, once per CPU model, a child process checks that
    the engine draws a token here (``llama_cpp.probe``).
    """
    engine = GENERATORS[name]
    engine.check(run)
    directory = resolve_checkpoint(checkpoint)
    max_len = _max_len(directory)
    if tokens > max_len:
        raise UsageError(
            f"--max-new-tokens: the prompt and the new tokens ({tokens}) exceed the model's "
            f"context ({max_len}); --engine {name} does not slide the window (--engine "
            "attnkit does)"
        )
    model_dir = converted_model(directory, engine, lambda: load(directory), say)
    probe(gguf_file(model_dir, run.precision), first_id=0)
    return engine(model_dir, run, context=tokens)


__all__ = [
    "ENGINES", "GENERATORS", "GENERATOR_NAMES", "NAMES", "DecodeOptions", "Engine",
    "RunOptions", "SampleOptions", "generator_side", "open_engine", "open_generator",
]  # fmt: skip
