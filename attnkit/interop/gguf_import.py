"""``attnkit import --from gguf``: a Llama GGUF file -> an attnkit ``DecoderOnlyLM`` checkpoint.

``read_gguf`` gives the hyper-parameters, float32 tensors under Hugging Face
Llama names (q/k rows already back in the rotate-half layout) and the
tokenizer. This module maps them onto attnkit:

* the config is the ``"llama"`` preset's options (``attnkit.models.presets``:
  rotary positions, RMSNorm, SwiGLU, pre-norm, no biases, unscaled
  embeddings, no dropout) with the file's shape (``llama_config``);
  SmolLM2-135M gives exactly the ``smollm2_135m`` preset;
* the tensors are renamed (``LLAMA_TO_ATTNKIT``), and each layer's
  ``q_proj``, ``k_proj`` and ``v_proj`` are stacked into attnkit's fused
  ``qkv_proj`` (rows ``q | k | v``, ``(D + 2 h_kv d, D)``); a tied output
  projection is the embedding itself;
* the tokenizer becomes a ``PretrainedTokenizer`` with the file's special ids and
  chat template (stored in ``tokenizer.json``; ``attnkit generate`` never
  needs the template).

**Special ids.** attnkit's decoder-only config needs distinct pad, BOS and
EOS ids. BOS and EOS are the file's; pad is the file's padding id when that
differs from both, else its unknown-token id, else the smallest id that is
neither (SmolLM2's file pads with EOS 2, so pad becomes ``<|endoftext|>`` 0).
Pad only fills batch rows that finished early.

**Pre-tokenizer.** The default is the file's ``tokenizer.ggml.pre``
(``"smollm"`` for SmolLM2: digits split one by one, as SmolLM2's own
``tokenizer.json`` and llama.cpp do, i.e. what the model was trained on).
``pre_tokenizer="gpt2"`` reproduces Hugging Face's GGUF loader instead,
which has no ``smollm`` entry and falls back to GPT-2's regex; the two differ
only where whitespace or a non-ASCII number precedes a number
(``attnkit.interop.gguf_tokenizer``).

The checkpoint directory is ``out`` itself (``config.json``,
``model.safetensors`` in float32, ``tokenizer.json``), written atomically,
plus ``import.json`` recording where it came from.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.checkpoints.files import save_checkpoint
from attnkit.checkpoints.loading import build_for_loading, load_model_state
from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import CheckpointError, UsageError
from attnkit.interop.gguf import GGUFCheckpoint, LlamaHParams, read_gguf
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.models.presets import LLAMA_OPTIONS

IMPORT_FILE = "import.json"

# Hugging Face Llama names (read_gguf's) -> attnkit DecoderOnlyLM names. q/k/v are
# fused separately (fuse_qkv); an untied lm_head keeps its name.
LLAMA_TO_ATTNKIT: list[tuple[str, str]] = [
    (r"model\.embed_tokens\.weight", r"embed.tokens.weight"),
    (r"model\.norm\.weight", r"final_norm.weight"),
    (r"lm_head\.weight", r"lm_head.weight"),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", r"layers.\1.self_attn_residual.norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj\.weight", r"layers.\1.self_attn.out_proj.weight"),
    (
        r"model\.layers\.(\d+)\.post_attention_layernorm\.weight",
        r"layers.\1.ffn_residual.norm.weight",
    ),
    (r"model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight", r"layers.\1.ffn.\2_proj.weight"),
]
_QKV = re.compile(r"model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.weight")


def pick_special_ids(special_ids: dict[str, int], vocab_size: int) -> dict[str, int]:
    """Distinct ``pad_id``/``bos_id``/``eos_id`` from a file's ids (see the module doc)."""
    chosen: dict[str, int] = {}
    for role in ("eos_id", "bos_id"):
        value = special_ids.get(role)
        if value is not None and value not in chosen.values():
            chosen[role] = value
    candidates = [special_ids.get("pad_id"), special_ids.get("unk_id")]
    for role in ("eos_id", "bos_id", "pad_id"):
        if role in chosen:
            continue
        pool = candidates if role == "pad_id" else []
        pick = next((c for c in pool if c is not None and c not in chosen.values()), None)
        if pick is None:
            pick = next(i for i in range(vocab_size) if i not in chosen.values())
        chosen[role] = pick
    return {role: chosen[role] for role in ("pad_id", "bos_id", "eos_id")}


def llama_config(hp: LlamaHParams, special_ids: dict[str, int]) -> DecoderOnlyConfig:
    """The ``"llama"`` preset with the file's shape and special ids."""
    return DecoderOnlyConfig.from_dict(
        {
            **LLAMA_OPTIONS,
            "d_model": hp.d_model,
            "num_heads": hp.num_heads,
            "num_kv_heads": hp.num_kv_heads,
            "d_ff": hp.d_ff,
            "num_layers": hp.num_layers,
            "vocab_size": hp.vocab_size,
            "max_len": hp.max_len,
            "rope_theta": hp.rope_theta,
            "norm_eps": hp.norm_eps,
            "tie_embeddings": hp.tie_embeddings,
            **pick_special_ids(special_ids, hp.vocab_size),
        }
    )


def llama_state_dict(tensors: dict[str, Tensor], hp: LlamaHParams) -> dict[str, Tensor]:
    """``read_gguf``'s Hugging Face Llama tensors as a ``DecoderOnlyLM`` state dict.

    Consumes ``tensors`` (entries are popped as they are used, so the float32
    copies are never held twice). A tied model gets ``lm_head.weight`` as the
    embedding tensor itself.
    """
    table = [(re.compile(f"^{pattern}$"), template) for pattern, template in LLAMA_TO_ATTNKIT]
    state: dict[str, Tensor] = {}
    qkv: dict[int, dict[str, Tensor]] = {}
    for name in list(tensors):
        tensor = tensors.pop(name)
        match = _QKV.match(name)
        if match:
            qkv.setdefault(int(match.group(1)), {})[match.group(2)] = tensor
            continue
        new = next((p.sub(t, name) for p, t in table if p.match(name)), None)
        if new is None:
            raise CheckpointError(f"tensor {name}: has no place in attnkit's DecoderOnlyLM")
        state[new] = tensor
    for layer, parts in sorted(qkv.items()):
        if set(parts) != {"q", "k", "v"}:
            raise CheckpointError(f"layer {layer}: q_proj, k_proj and v_proj are not all there")
        fused = torch.cat((parts.pop("q"), parts.pop("k"), parts.pop("v")), dim=0)
        state[f"layers.{layer}.self_attn.qkv_proj.weight"] = fused
    if hp.tie_embeddings:
        state["lm_head.weight"] = state["embed.tokens.weight"]
    return state


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


def import_gguf(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    pre_tokenizer: str | None = None,
) -> Path:
    """Write the attnkit checkpoint of Llama GGUF file ``source`` to directory ``out``.

    Args:
        overwrite: replace ``out`` if it holds anything.
        pre_tokenizer: override the file's ``tokenizer.ggml.pre`` (``"gpt2"``:
            Hugging Face's GGUF tokenizer ids; see the module doc).

    Returns ``out``. Every failure (a missing, truncated or foreign file, an
    architecture, tensor type or tokenizer this reader does not support) is a
    one-line ``CheckpointError`` naming the file and the field or tensor, and
    leaves ``out`` as it was.
    """
    source, out = Path(source), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise UsageError(f"{out}: already exists; pass overwrite=True (--overwrite) to replace it")
    ckpt = read_gguf(source, pre_tokenizer=pre_tokenizer)
    config = llama_config(ckpt.hparams, ckpt.special_ids)
    tokenizer = build_tokenizer(ckpt, config)
    types = Counter(ckpt.tensor_types.values())
    state = llama_state_dict(ckpt.tensors, ckpt.hparams)
    model = build_for_loading(config)  # strict names and shapes, and the tie, checked here
    load_model_state(model, state, source=source)
    del state
    if out.exists() and not out.is_dir():
        out.unlink()
    save_checkpoint(
        out,
        model_state=model.state_dict(),
        config=config.to_dict(),
        tokenizer_json=tokenizer.to_json(),
    )
    record: dict[str, Any] = {
        "from": "gguf",
        "source": str(source.resolve()),
        "architecture": ckpt.architecture,
        "name": ckpt.metadata.get("general.name"),
        "tensor_types": dict(sorted(types.items())),
        "pre_tokenizer": pre_tokenizer or ckpt.metadata.get("tokenizer.ggml.pre"),
        "file_special_ids": ckpt.special_ids,
        "dtype": "float32",
    }
    (out / IMPORT_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return out
