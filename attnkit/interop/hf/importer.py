"""``attnkit import --from hf DIR --out RUN``: pretrained weights into an attnkit run.

Dispatch on ``config.json``'s ``model_type``:

* ``marian`` -> ``EncoderDecoder`` (``attnkit.interop.hf.marian_import``), including
  the directories ``attnkit export --to hf`` writes (bit-exact round trip);
* ``bert`` -> ``EncoderOnlyModel`` (``attnkit.interop.hf.bert``), with a token-level
  head for ``BertForTokenClassification`` / ``BertForQuestionAnswering``
  (``attnkit.interop.hf.bert_heads``);
* ``gpt2`` -> ``DecoderOnlyLM`` (``attnkit.interop.hf.gpt2``);
* ``llama`` -> ``DecoderOnlyLM`` (``attnkit.interop.hf.llama``), the GGUF import's path;
* ``t5`` -> ``EncoderDecoder`` with T5's options (``attnkit.interop.hf.t5_import``).

The directory is read without ``transformers`` and without unpickling:
``config.json``, ``tokenizer.json`` (+ ``tokenizer_config.json``) and
``model.safetensors`` (``attnkit.interop.hf.files``). Each importer maps the
tensors through its key table (``attnkit.interop.keymap``): every tensor is
placed, and the layer counts and every shape ``config.json`` implies are
checked against the file before anything is built (errors name the HF
tensor or the ``config.json`` field); NaN or infinite weights are refused.
``attnkit.interop.import_writer`` writes the run, as for GGUF:
``checkpoints/step_00000000/`` and ``import.json``, atomically, after
attnkit's loader has accepted the checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnkit.errors import CheckpointError
from attnkit.interop.hf.bert import import_bert
from attnkit.interop.hf.files import CONFIG, HFDirectory, open_directory
from attnkit.interop.hf.gpt2 import import_gpt2
from attnkit.interop.hf.llama import import_llama
from attnkit.interop.hf.marian_import import import_marian
from attnkit.interop.hf.t5_import import import_t5
from attnkit.interop.import_writer import Imported, write_import
from attnkit.interop.outdir import check_target

IMPORTERS: dict[str, Callable[[HFDirectory], Imported]] = {
    "marian": import_marian,
    "bert": import_bert,
    "gpt2": import_gpt2,
    "llama": import_llama,
    "t5": import_t5,
}


def read_hf(source: str | Path) -> Imported:
    """Read and map the model in ``source`` (nothing is written)."""
    directory = open_directory(source)
    kind = directory.model_type
    if kind not in IMPORTERS:
        raise CheckpointError(
            f"{directory.file(CONFIG)}: model_type {kind!r} is not supported "
            f"(supported: {', '.join(sorted(IMPORTERS))})"
        )
    return IMPORTERS[kind](directory)


def import_hf(
    source: str | Path,
    out: str | Path,
    *,
    overwrite: bool = False,
    hub: dict[str, object] | None = None,
) -> Path:
    """Import the Hugging Face model directory ``source`` into the run ``out``.

    Returns the checkpoint directory written; ``hub`` (``attnkit.interop.hub.client``'s
    record, when ``source`` was fetched by name) goes into ``import.json``. Raises
    ``CheckpointError`` (one line naming the file) for a directory that is not a
    model, an unsupported ``model_type`` or field, a size or shape the tensors do not have, NaN
    weights, a missing tokenizer or a pickle-only checkpoint.
    """
    check_target(Path(out), overwrite=overwrite)
    return write_import(read_hf(source), source, out, overwrite=overwrite, hub=hub)
