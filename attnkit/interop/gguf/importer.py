"""``attnkit import --from gguf``: a Llama GGUF file -> an attnkit ``DecoderOnlyLM`` run.

``read_gguf`` gives the hyper-parameters, float32 tensors under Hugging Face
Llama names (q/k rows already back in the rotate-half layout), every size
already checked against the file's tensors, and the tokenizer. From there
the path is the Hugging Face Llama import's (``attnkit.interop.llama``):

* the config is the ``"llama"`` preset's options with the file's shape and
  special ids (``llama_config``; SmolLM2-135M gives exactly the
  ``smollm2_135m`` preset; SmolLM2's file pads with EOS 2, so pad becomes
  its unknown token ``<|endoftext|>`` 0). Pad only fills batch rows that
  finished early;
* the tensors go through ``LLAMA_KEYS`` (q, k, v stacked into the fused
  ``qkv_proj``; a tied output projection is the embedding itself);
* the tokenizer becomes a ``PretrainedTokenizer`` with the config's special ids
  and the file's chat template (stored in ``tokenizer.json``; ``attnkit
  generate`` never needs the template).

**Pre-tokenizer.** The default is the file's ``tokenizer.ggml.pre``
(``"smollm"`` for SmolLM2: digits split one by one, as SmolLM2's own
``tokenizer.json`` and llama.cpp do, i.e. what the model was trained on).
``pre_tokenizer="gpt2"`` reproduces Hugging Face's GGUF loader instead,
which has no ``smollm`` entry and falls back to GPT-2's regex; the two differ
only where whitespace or a non-ASCII number precedes a number
(``attnkit.interop.gguf.tokenizer``).

The run is written by ``attnkit.interop.import_writer`` as every import is:
``checkpoints/step_00000000/`` (float32) and ``import.json``, atomically,
after attnkit's loader has accepted it. With ``keep_quantized`` the Q4_0/Q4_1/Q8_0
linears are stored as their blocks instead (``attnkit.interop.gguf.int4_import``).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from torch import Tensor

from attnkit.checkpoints.int4_weights import INT4_FILE
from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import CheckpointError
from attnkit.interop.gguf.blocks import KEPT_TYPES, weight_shape
from attnkit.interop.gguf.int4_import import (
    int4_entries,
    keep_tied_heads,
    kept_linears,
    settle_records,
    tied_heads,
)
from attnkit.interop.gguf.read import GGUFCheckpoint, read_gguf
from attnkit.interop.import_writer import Imported, write_import
from attnkit.interop.keymap import plan_load
from attnkit.interop.llama import llama_config, llama_dims, llama_ids, llama_keys
from attnkit.interop.outdir import check_target
from attnkit.models.lm_config import DecoderOnlyConfig

__all__ = ["build_tokenizer", "import_gguf", "llama_config"]


def build_tokenizer(ckpt: GGUFCheckpoint, config: DecoderOnlyConfig) -> PretrainedTokenizer:
    """The file's tokenizer with the config's special ids and the file's chat template."""
    if ckpt.tokenizer is None:
        raise CheckpointError(f"{ckpt.path}: tokenizer.ggml.tokens: no tokenizer was read")
    # decode skips what HF's skip_special_tokens=True skips (the parity tests compare texts)
    return PretrainedTokenizer.with_special_skipped(
        ckpt.tokenizer,
        pad_id=config.pad_id,
        bos_id=config.bos_id,
        eos_id=config.eos_id,
        unk_id=ckpt.special_ids.get("unk_id"),
        chat_template=ckpt.chat_template,
    )


def read_gguf_import(
    source: Path, *, pre_tokenizer: str | None = None, keep_quantized: bool = False
) -> Imported:
    """The ``Imported`` of Llama GGUF file ``source`` (nothing is written); with
    ``keep_quantized``, its Q4_0/Q4_1/Q8_0 linears as their blocks (``int4_import``)."""
    ckpt = read_gguf(source, pre_tokenizer=pre_tokenizer, keep_quantized=keep_quantized)
    hp = ckpt.hparams
    _, notes = llama_ids(hp, ckpt.special_ids, str(source))
    config = llama_config(hp, ckpt.special_ids)
    tokenizer = build_tokenizer(ckpt, config)
    # Already checked by read_gguf under GGUF names; here they only change keys.
    shapes = {k: weight_shape(t) for k, t in ckpt.tensors.items()}
    plan = plan_load(llama_keys(hp), shapes, llama_dims(hp), str(source))
    kept = kept_linears(config) if keep_quantized else {}
    heads: dict[str, Tensor] = {}
    if keep_quantized:
        notes += ckpt.notes
        heads = keep_tied_heads(tied_heads(config), ckpt.tensors, plan.sources())
        notes += settle_records(ckpt.tensors, plan.sources(), kept, ckpt.tensor_types)
        notes += [f"--keep-quantized: the output head {h} keeps the blocks of the token "
                  "table it is tied to" for h in heads]  # fmt: skip
    state, _ = plan.load(ckpt.tensors.pop, finite=False)  # popped: never held twice
    for head, blocks in heads.items():  # untied: the table stays float for the lookups
        state[head] = blocks
        kept[head] = head.removesuffix(".weight")
    details: dict[str, object] = {
        "name": ckpt.metadata.get("general.name"),
        "tensor_types": dict(sorted(Counter(ckpt.tensor_types.values()).items())),
        "pre_tokenizer": pre_tokenizer or ckpt.metadata.get("tokenizer.ggml.pre"),
        "file_special_ids": ckpt.special_ids,
        "dtype": "float32",
    }
    extra: dict[str, str] = {}
    if keep_quantized:
        kinds = sorted({k for k in ckpt.tensor_types.values() if k in KEPT_TYPES})
        record, facts = int4_entries(state, kept, f"GGUF {'/'.join(kinds)} blocks")
        if record is not None:
            extra[INT4_FILE] = record.to_json()
            details["int4"] = facts
            details["dtype"] = "GGUF blocks (int4.json) and float32"
    return Imported(config, state, tokenizer, "gguf", ckpt.architecture, notes, details, extra)


def import_gguf(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    pre_tokenizer: str | None = None,
    hub: dict[str, object] | None = None,
    keep_quantized: bool = False,
) -> Path:
    """Import the Llama GGUF file ``source`` as the run ``out``; returns its checkpoint.

    Args:
        overwrite: replace ``out`` if it holds anything.
        pre_tokenizer: override the file's ``tokenizer.ggml.pre`` (``"gpt2"``:
            Hugging Face's GGUF tokenizer ids; see the module doc).
        hub: the record of a download by name (``attnkit.interop.hub.client``), for ``import.json``.
        keep_quantized: keep Q4_0/Q4_1/Q8_0 matrices as their blocks, exactly (``int4_import``):
            the checkpoint then runs as int4 by default, and a float load of it holds
            exactly the weights of the import without it.

    Every failure (a missing, truncated, crafted or foreign file, an
    architecture, tensor type or tokenizer this reader does not support) is a
    one-line ``CheckpointError`` naming the file and the field or tensor, and
    leaves ``out`` as it was.
    """
    source = Path(source)
    check_target(Path(out), overwrite=overwrite)  # before minutes of reading
    imported = read_gguf_import(source, pre_tokenizer=pre_tokenizer, keep_quantized=keep_quantized)
    return write_import(imported, source, Path(out), overwrite=overwrite, hub=hub)
