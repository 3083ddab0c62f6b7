"""``attnkit import --from hf DIR --out RUN``: pretrained weights into an attnkit run.

Dispatch on ``config.json``'s ``model_type``:

* ``marian`` -> ``EncoderDecoder`` (``attnkit.interop.hf_marian_import``), including
  the directories ``attnkit export --to hf`` writes (bit-exact round trip);
* ``bert`` -> ``EncoderOnlyModel`` (``attnkit.interop.hf_bert``);
* ``gpt2`` -> ``DecoderOnlyLM`` (``attnkit.interop.hf_gpt2``).

The directory is read without ``transformers`` and without unpickling:
``config.json``, ``tokenizer.json`` (+ ``tokenizer_config.json``) and
``model.safetensors`` (``attnkit.interop.hf_files``). The attnkit model is
built from the mapped config, every tensor's shape is checked against it
(errors name the HF key and ``config.json``), and it is loaded strictly.

The run directory gets ``checkpoints/step_00000000/`` (an ordinary attnkit
checkpoint: translate, generate, evaluate, attention and export read it)
and ``import.json`` (source, model type, and notes on what could not be
carried over exactly). It is written into a temporary directory and renamed
into place, so ``RUN`` never holds half an import.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path

from attnkit import __version__
from attnkit.checkpoints import safe_files
from attnkit.checkpoints.files import save_checkpoint
from attnkit.checkpoints.loading import load_model_state
from attnkit.checkpoints.rundir import checkpoint_dir
from attnkit.errors import CheckpointError
from attnkit.interop.hf_bert import import_bert
from attnkit.interop.hf_files import CONFIG, WEIGHTS, HFDirectory, check_shapes, open_directory
from attnkit.interop.hf_gpt2 import import_gpt2
from attnkit.interop.hf_import_types import Imported
from attnkit.interop.hf_marian_import import import_marian
from attnkit.interop.outdir import staged_directory
from attnkit.models.registry import build_model

IMPORTERS: dict[str, Callable[[HFDirectory], Imported]] = {
    "marian": import_marian,
    "bert": import_bert,
    "gpt2": import_gpt2,
}
IMPORT_FILE = "import.json"


def read_hf(source: str | Path) -> tuple[HFDirectory, Imported]:
    """Read and map the model in ``source`` (nothing is written)."""
    directory = open_directory(source)
    kind = directory.model_type
    if kind not in IMPORTERS:
        raise CheckpointError(
            f"{directory.file(CONFIG)}: model_type {kind!r} is not supported "
            f"(supported: {', '.join(sorted(IMPORTERS))})"
        )
    return directory, IMPORTERS[kind](directory)


def import_hf(source: str | Path, out: str | Path, *, overwrite: bool = False) -> Path:
    """Import the Hugging Face model directory ``source`` into the run ``out``.

    Returns the checkpoint directory written. Raises ``CheckpointError`` (one
    line naming the file) for a directory that is not a model, an unsupported
    ``model_type`` or field, a shape mismatch, a missing tokenizer or a
    pickle-only checkpoint.
    """
    directory, imported = read_hf(source)
    model = build_model(imported.config)
    check_shapes(imported.state, model.state_dict(), imported.origin, directory)
    load_model_state(model, imported.state, source=directory.file(WEIGHTS))
    record = {
        "source": str(Path(source).resolve()),
        "format": "hf",
        "model_type": directory.model_type,
        "architectures": directory.config.get("architectures"),
        "family": imported.config.family,
        "attnkit": __version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "notes": imported.notes,
    }
    with staged_directory(out, overwrite=overwrite) as tmp:
        save_checkpoint(
            checkpoint_dir(tmp, 0),
            model_state=model.state_dict(),
            config=imported.config.to_dict(),
            tokenizer_json=imported.tokenizer.to_json(),
        )
        safe_files.write_json(tmp / IMPORT_FILE, record)
    return checkpoint_dir(out, 0)
