"""The one writer of every import (``attnkit import --from hf`` and ``--from gguf``).

Each importer (``hf.marian_import``, ``hf.bert``, ``hf.gpt2``, ``hf.llama``,
``gguf.importer``) reads and checks its file and hands back an ``Imported``;
``write_import`` writes it the same way for all:

1. a tokenizer larger than the model's vocabulary is refused (every loader
   would refuse the checkpoint);
2. into a temporary directory beside ``out`` (``staged_directory``) go
   ``checkpoints/step_00000000/`` (``config.json``, ``model.safetensors`` in
   float32, ``tokenizer.json``: an ordinary checkpoint) and ``import.json``;
3. that checkpoint is loaded by attnkit's own loader (``load_model``), so an
   import never leaves behind what the loader refuses;
4. the directory is renamed to ``out``; on any error ``out`` keeps what it held.

``import.json`` (``RECORD_FIELDS``): ``format`` (``"hf"``, ``"gguf"``),
``source``, ``model_type``, ``family``, ``attnkit`` (version), ``date``,
``notes`` (what could not be carried over exactly, in words),
``details`` (the format's own facts: tensor types, ids nominated, ...) and
``hub`` (for a model fetched from the Hugging Face Hub by name: the repository,
the revision asked for, the commit it resolved to, the endpoint and every
fetched file's SHA-256, ``attnkit.interop.hub.client.record``; ``null`` otherwise).
Directories written before this writer existed still load (``load_model``
takes a run or a checkpoint directory); ``read_import_record`` also reads
their records: HF's (the same keys, no ``details``) and GGUF's (the
checkpoint at ``out`` itself, ``"from": "gguf"``).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from attnkit import __version__
from attnkit.checkpoints import safe_files
from attnkit.checkpoints.files import save_checkpoint
from attnkit.checkpoints.loading import load_model
from attnkit.checkpoints.rundir import checkpoint_dir
from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import CheckpointError
from attnkit.interop.outdir import staged_directory
from attnkit.models.config_base import ModelConfig
from attnkit.models.registry import family_of

IMPORT_FILE = "import.json"
RECORD_FIELDS = (
    "format", "source", "model_type", "family", "attnkit", "date", "notes", "details", "hub"
)  # fmt: skip
_RECORD_LIMIT = 16 << 20

# Computed position tables (sinusoids, RoPE's cos/sin) hold max_len x width values, built
# when the model is. 2^24 is Llama 3.1's 131072 positions at head dim 128; a count from a
# file past it is refused before anything is allocated (stored tables are checked against
# the file's own tensors instead).
MAX_POSITION_VALUES = 1 << 24


@dataclass
class Imported:
    """An imported model before it is written.

    Attributes:
        config: the attnkit family config (``TransformerConfig``, ``EncoderOnlyConfig``, ...).
        state: attnkit state-dict key -> tensor (tied keys share one tensor).
        tokenizer: the model's own tokenizer with the config's special ids.
        format: ``"hf"`` or ``"gguf"``; ``model_type``: the source's (``"bert"``, ``"llama"``).
        notes: what the import could not carry over exactly, in words.
        details: the format's own facts for ``import.json``.
        extra_files: name -> text, written into the checkpoint beside its weights
            (a GGUF import's ``int4.json``: ``attnkit.checkpoints.int4_weights``).
    """

    config: ModelConfig
    state: dict[str, Tensor]
    tokenizer: PretrainedTokenizer
    format: str
    model_type: str
    notes: list[str] = field(default_factory=list)
    details: dict[str, object] = field(default_factory=dict)
    extra_files: dict[str, str] = field(default_factory=dict)


def check_positions(count: int, width: int, where: str) -> None:
    """Refuse a position count whose computed table (``count x width``) is past the ceiling.

    ``where`` names the field (``"config.json: max_position_embeddings"``).
    """
    if count * width > MAX_POSITION_VALUES:
        raise CheckpointError(
            f"{where}: {count} positions would need a table of {count} x {width} values, "
            f"more than attnkit builds for an import ({MAX_POSITION_VALUES}); "
            f"at most {MAX_POSITION_VALUES // width} positions at this width"
        )


def _float32(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Floating tensors as float32; tied keys keep sharing one tensor."""
    converted: dict[int, Tensor] = {}
    return {
        key: converted.setdefault(id(t), t.float() if t.is_floating_point() else t)
        for key, t in state.items()
    }


def write_import(
    imported: Imported,
    source: str | Path,
    out: str | Path,
    *,
    overwrite: bool = False,
    hub: dict[str, object] | None = None,
) -> Path:
    """Write ``imported`` (read from ``source``) as the run ``out``; returns its checkpoint.

    See the module doc; ``hub`` is the record of a download by name. ``imported.state``
    is emptied (its tensors are freed before the written checkpoint is loaded back).
    """
    source = Path(source)
    config, tokenizer = imported.config, imported.tokenizer
    vocab_field = family_of(config).vocab_field or "vocab_size"
    vocab = getattr(config, vocab_field)
    if tokenizer.vocab_size > vocab:
        raise CheckpointError(
            f"{source}: the tokenizer's {tokenizer.vocab_size} tokens do not fit the model's "
            f"vocabulary of {vocab}; the tokenizer belongs to another model"
        )
    record = {
        "format": imported.format,
        "source": str(source.resolve()),
        "model_type": imported.model_type,
        "family": config.family,
        "attnkit": __version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "notes": imported.notes,
        "details": imported.details,
        "hub": hub,
    }
    with staged_directory(out, overwrite=overwrite) as tmp:
        written = checkpoint_dir(tmp, 0)
        save_checkpoint(
            written,
            model_state=_float32(imported.state),
            config=config.to_dict(),
            tokenizer_json=tokenizer.to_json(),
            extra_files=imported.extra_files,
        )
        imported.state.clear()
        try:
            load_model(written, "cpu")
        except CheckpointError as e:
            raise CheckpointError(
                f"{source}: attnkit's loader refuses the checkpoint this import would write "
                f"({e}); nothing was written"
            ) from None
        safe_files.write_json(tmp / IMPORT_FILE, record)
    return checkpoint_dir(out, 0)


def read_import_record(path: str | Path) -> dict[str, Any]:
    """The ``import.json`` of an import directory, in ``RECORD_FIELDS`` (any writer's)."""
    file = Path(path) / IMPORT_FILE
    record = safe_files.read_json(file, _RECORD_LIMIT)
    if not isinstance(record, dict):
        raise CheckpointError(f"{file}: not an import record (expected a JSON object)")
    if "format" not in record and "from" in record:  # the first GGUF writer's
        record = {"format": record.pop("from"), "model_type": record.get("architecture"),
                  "family": "decoder_only", "notes": [], **record}  # fmt: skip
    out = {name: record.get(name) for name in RECORD_FIELDS}
    extra = {k: v for k, v in record.items() if k not in RECORD_FIELDS}
    out["details"] = {**extra, **(record.get("details") or {})}
    return out
