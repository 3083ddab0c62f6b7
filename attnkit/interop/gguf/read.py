"""Read a llama.cpp GGUF file of the Llama architecture: hyper-parameters, tensors, tokenizer.

GGUF (llama.cpp's single-file format) holds typed metadata (the architecture's
hyper-parameters under ``llama.*``, the tokenizer under ``tokenizer.*``) and
tensors, often quantized in blocks. ``read_gguf`` returns a ``GGUFCheckpoint``:

* ``hparams``: a validated ``LlamaHParams`` (names are attnkit's; ``GGUF_FIELDS``
  names the GGUF key behind each);
* ``tensors``: float32, keyed by Hugging Face Llama names
  (``model.layers.N.self_attn.q_proj.weight``, ...), dequantized by the
  ``gguf`` package's numpy code (the same call Hugging Face's GGUF loader
  makes, so the values agree bit for bit), with llama.cpp's q/k row
  permutation undone (``unpermute_rope_rows``); with ``keep_quantized``, a
  Q4_0/Q4_1/Q8_0 tensor comes as its blocks instead, exactly (a uint8 record:
  ``attnkit.interop.gguf.blocks``);
* ``tokenizer``: a ``tokenizers.Tokenizer`` rebuilt from the metadata
  (``attnkit.interop.gguf.tokenizer``), plus the special ids and the chat template.

Anything this reader cannot honour exactly (another architecture, a tensor
type outside ``SUPPORTED_TYPES``, RoPE scaling, experts, extra tensors) is a
one-line ``CheckpointError`` naming the file and the field or tensor, never
a silently different model. So is a crafted file: every size in the
metadata is checked against the file's own tensors (``block_count`` against
the blocks it holds, widths against their shapes) and the context length
against a ceiling before anything is allocated, and a tensor holding NaN or
infinite values is refused by name. GGUF and Hugging Face names live in the
interop tables only (``GGUF_LLAMA_KEYS``, ``attnkit.interop.llama``), never in
attnkit's modules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np
import torch
from torch import Tensor

from attnkit.errors import CheckpointError
from attnkit.interop.gguf.blocks import KEPT_TYPES, to_record
from attnkit.interop.gguf.file import GGUFValue, metadata_values, open_gguf
from attnkit.interop.keymap import plan_load
from attnkit.interop.keytable import Rule, Step, Table
from attnkit.interop.llama import LlamaHParams, llama_dims

if TYPE_CHECKING:
    from gguf import ReaderTensor
    from tokenizers import Tokenizer

T = TypeVar("T")

SUPPORTED_ARCHITECTURES = ("llama",)
# Plain floats and the classic llama.cpp block formats, all dequantized by gguf-py's numpy
# code. The i-quants, ternary and fp4 formats are left out until a file of each is checked.
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                   "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")  # fmt: skip

# attnkit's special-id names -> tokenizer.ggml.* keys.
_SPECIAL_KEYS = {"bos_id": "bos_token_id", "eos_id": "eos_token_id",
                 "pad_id": "padding_token_id", "unk_id": "unknown_token_id"}  # fmt: skip

# LlamaHParams field -> the llama.* key it is read from (for messages).
GGUF_FIELDS = {"num_layers": "llama.block_count", "d_model": "llama.embedding_length",
               "num_heads": "llama.attention.head_count",
               "num_kv_heads": "llama.attention.head_count_kv",
               "d_ff": "llama.feed_forward_length", "vocab_size": "llama.vocab_size",
               "max_len": "llama.context_length", "rope_theta": "llama.rope.freq_base",
               "norm_eps": "llama.attention.layer_norm_rms_epsilon"}  # fmt: skip
GGUF_SOURCE = "the llama.* metadata"


@dataclass
class GGUFCheckpoint:
    """What ``read_gguf`` returns (see the module doc)."""

    path: Path
    architecture: str
    hparams: LlamaHParams
    tensors: dict[str, Tensor]  # HF Llama names -> float32
    tensor_types: dict[str, str]  # HF Llama names -> ggml type in the file ("Q4_1", ...)
    tokenizer: Tokenizer | None
    special_ids: dict[str, int]  # bos_id, eos_id, pad_id, unk_id: those the file gives
    chat_template: str | None
    metadata: dict[str, int | float | str] = field(
        default_factory=dict
    )  # scalar fields; arrays as lengths
    notes: list[str] = field(default_factory=list)  # what keep_quantized could not keep


def unpermute_rope_rows(weight: Tensor, num_heads: int) -> Tensor:
    """Undo llama.cpp's q/k row permutation: GGUF layout -> Hugging Face layout.

    HF Llama applies RoPE in the rotate-half layout (``attnkit.positions.rotary``),
    pairing rows ``i`` and ``i + d/2`` of each head; llama.cpp's kernel pairs
    rows ``2i`` and ``2i + 1``. Its converter therefore moves, within each head
    ``h`` of ``d`` rows, HF row ``h*d + s*d/2 + i`` (half ``s`` in {0, 1}, pair
    ``i < d/2``) to GGUF row ``h*d + 2*i + s``. The inverse used here:

        W_hf[h*d + s*d/2 + i] = W_gguf[h*d + 2*i + s]

    i.e. view the rows as ``(heads, d/2, 2)`` and swap the last two axes.
    ``num_heads`` is the query heads for ``attn_q``, the kv heads for ``attn_k``.
    """
    rows = weight.size(0)
    if rows % (2 * num_heads) != 0:
        raise ValueError(f"num_heads: {rows} rows do not split into {num_heads} heads of pairs")
    d = rows // num_heads
    return (
        weight.reshape(num_heads, d // 2, 2, *weight.shape[1:])
        .transpose(1, 2)
        .reshape(weight.shape)
    )


def permute_rope_rows(weight: Tensor, num_heads: int) -> Tensor:
    """llama.cpp's q/k row permutation (Hugging Face -> GGUF), the inverse of
    ``unpermute_rope_rows``: HF row ``h*d + s*d/2 + i`` goes to GGUF row ``h*d + 2*i + s``."""
    d = weight.size(0) // num_heads
    return (
        weight.reshape(num_heads, 2, d // 2, *weight.shape[1:])
        .transpose(1, 2)
        .reshape(weight.shape)
    )


def _rope_rows(heads: str) -> Step:
    return Step(
        f"llama.cpp's RoPE row order ({heads} heads)",
        load=lambda t, d: unpermute_rope_rows(t, d[heads]),
        save=lambda t, d: permute_rope_rows(t, d[heads]),
    )


_M, _B = "model.layers.{i}", "blk.{i}"
# Hugging Face Llama names <-> GGUF tensor names (llama.cpp's gguf-py/constants.py names);
# sizes: attnkit.interop.llama.llama_dims. q and k rows change order (see unpermute_rope_rows).
GGUF_LLAMA_KEYS = Table(
    "a plain Llama",
    (
        Rule("model.embed_tokens.weight", "token_embd.weight", "V D"),
        Rule("model.norm.weight", "output_norm.weight", "D"),
        Rule("lm_head.weight", "output.weight", "V D"),
        Rule(f"{_M}.input_layernorm.weight", f"{_B}.attn_norm.weight", "D"),
        Rule(f"{_M}.self_attn.q_proj.weight", f"{_B}.attn_q.weight", "D D", (_rope_rows("H"),)),
        Rule(f"{_M}.self_attn.k_proj.weight", f"{_B}.attn_k.weight", "KV D",
             (_rope_rows("HKV"),)),
        Rule(f"{_M}.self_attn.v_proj.weight", f"{_B}.attn_v.weight", "KV D"),
        Rule(f"{_M}.self_attn.o_proj.weight", f"{_B}.attn_output.weight", "D D"),
        Rule(f"{_M}.post_attention_layernorm.weight", f"{_B}.ffn_norm.weight", "D"),
        Rule(f"{_M}.mlp.gate_proj.weight", f"{_B}.ffn_gate.weight", "F D"),
        Rule(f"{_M}.mlp.up_proj.weight", f"{_B}.ffn_up.weight", "F D"),
        Rule(f"{_M}.mlp.down_proj.weight", f"{_B}.ffn_down.weight", "D F"),
    ),
)  # fmt: skip


# -- metadata ---------------------------------------------------------------------------


class _Fields:
    """Typed access to metadata, every failure naming the file and the key."""

    def __init__(self, path: Path, values: dict[str, GGUFValue]) -> None:
        self.path, self.values = path, values

    def error(self, key: str, message: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: {key}: {message}")

    def get(self, key: str, kind: type[T], default: T | None = None) -> T:
        if key not in self.values:
            if default is None:
                raise self.error(key, "missing from the GGUF metadata")
            return default
        value = self.values[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise self.error(key, f"expected {kind.__name__}, got {value!r}")
        return cast(T, value)  # a ``kind`` (checked above)

    def positive(self, key: str, default: int | None = None) -> int:
        value = self.get(key, int, default)
        if value < 1:
            raise self.error(key, f"must be >= 1, got {value}")
        return value


def read_llama_hparams(
    path: Path, values: dict[str, GGUFValue], tensor_shapes: dict[str, tuple[int, ...]]
) -> LlamaHParams:
    """Validate ``llama.*`` metadata into ``LlamaHParams``; errors name the key.

    Sizes are only read here; ``read_gguf`` checks them against the tensors.
    """
    f = _Fields(path, values)
    arch = f.get("general.architecture", str)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise f.error("general.architecture", f"{arch!r} is not supported (supported: llama)")
    num_heads = f.positive("llama.attention.head_count")
    d_model = f.positive("llama.embedding_length")
    if d_model % num_heads != 0:
        raise f.error(
            "llama.attention.head_count",
            f"embedding_length {d_model} / head_count {num_heads} is not an even head dim",
        )
    head_dim = d_model // num_heads
    for key in ("llama.rope.dimension_count", "llama.attention.key_length",
                "llama.attention.value_length"):  # fmt: skip
        if key in values and f.get(key, int) != head_dim:
            raise f.error(key, f"{values[key]} != head dim {head_dim} (partial rotary unsupported)")
    if f.get("llama.expert_count", int, 0) > 0:
        raise f.error("llama.expert_count", "mixture-of-experts Llamas are not supported")
    scaling = f.get("llama.rope.scaling.type", str, "none")
    if scaling != "none":
        raise f.error("llama.rope.scaling.type", f"RoPE scaling {scaling!r} is not supported")
    embed = tensor_shapes.get("token_embd.weight")
    if embed is None:
        raise CheckpointError(f"{path}: tensor token_embd.weight: missing")
    hp = LlamaHParams(
        num_layers=f.positive("llama.block_count"),
        d_model=d_model,
        num_heads=num_heads,
        num_kv_heads=f.positive("llama.attention.head_count_kv", num_heads),
        d_ff=f.positive("llama.feed_forward_length"),
        vocab_size=f.positive("llama.vocab_size", embed[0]),
        max_len=f.positive("llama.context_length", 2048),
        rope_theta=f.get("llama.rope.freq_base", float, 10000.0),
        norm_eps=f.get("llama.attention.layer_norm_rms_epsilon", float),
        tie_embeddings="output.weight" not in tensor_shapes,
    )
    hp.check(GGUF_FIELDS, str(path))
    return hp


# -- the file ---------------------------------------------------------------------------


def read_gguf(
    path: str | os.PathLike[str],
    *,
    tensors: bool = True,
    tokenizer: bool = True,
    pre_tokenizer: str | None = None,
    keep_quantized: bool = False,
) -> GGUFCheckpoint:
    """Read a Llama GGUF file (see the module doc).

    Args:
        tensors: dequantize the tensors (skip for metadata only).
        keep_quantized: Q4_0/Q4_1/Q8_0 matrices as records of their blocks (module doc).
        tokenizer: build the tokenizer from the metadata.
        pre_tokenizer: override ``tokenizer.ggml.pre`` (see
            ``attnkit.interop.gguf.tokenizer.PRE_TOKENIZERS``).
    """
    path = Path(path)
    reader = open_gguf(path)
    values = metadata_values(path, reader)
    shapes = {t.name: tuple(int(n) for n in reversed(t.shape.tolist())) for t in reader.tensors}
    hparams = read_llama_hparams(path, values, shapes)
    by_name = {t.name: t for t in reader.tensors}
    for t in reader.tensors:
        kind = t.tensor_type.name
        if kind not in SUPPORTED_TYPES:
            raise CheckpointError(
                f"{path}: tensor {t.name}: ggml type {kind} is not supported "
                f"(supported: {', '.join(SUPPORTED_TYPES)})"
            )
    table = (
        GGUF_LLAMA_KEYS.without(["lm_head.weight"]) if hparams.tie_embeddings else GGUF_LLAMA_KEYS
    )
    dims = llama_dims(hparams, GGUF_FIELDS, GGUF_SOURCE)
    plan = plan_load(table, shapes, dims, str(path))  # every size checked, nothing read yet
    hparams.check_positions(GGUF_FIELDS, str(path))
    sources = plan.sources()

    out: dict[str, Tensor] = {}
    notes: list[str] = []
    if tensors:
        out, _ = plan.load(lambda name: _read(by_name[name], shapes[name], keep_quantized, notes))

    tok = None
    if tokenizer:
        from attnkit.interop.gguf.tokenizer import build_tokenizer

        tok = build_tokenizer(path, values, pre_tokenizer=pre_tokenizer)
    specials = {}
    for ours, theirs in _SPECIAL_KEYS.items():
        key = f"tokenizer.ggml.{theirs}"
        if key in values:
            token_id = values[key]
            if not isinstance(token_id, int) or not 0 <= token_id < hparams.vocab_size:
                raise CheckpointError(
                    f"{path}: {key}: {token_id!r} is not an id of the {hparams.vocab_size} tokens"
                )
            specials[ours] = token_id
    scalars = {k: (len(v) if isinstance(v, list) else v) for k, v in values.items()}
    return GGUFCheckpoint(
        path=path,
        architecture=cast(str, values["general.architecture"]),  # checked by read_llama_hparams
        hparams=hparams,
        tensors=out,
        tensor_types={ours: by_name[keys[0]].tensor_type.name for ours, keys in sources.items()},
        tokenizer=tok,
        special_ids=specials,
        # a string by the GGUF spec, not checked here (as before the annotation)
        chat_template=cast("str | None", values.get("tokenizer.chat_template")),
        metadata=scalars,
        notes=notes,
    )


def _read(t: ReaderTensor, shape: tuple[int, ...], keep: bool, notes: list[str]) -> Tensor:
    """One tensor: a record of its blocks if ``keep`` and it is Q4_0/Q4_1/Q8_0 (else, or
    where its blocks have no exact int4 form, float32 with a note)."""
    kind = t.tensor_type.name
    if keep and kind in KEPT_TYPES and len(shape) == 2:
        record = to_record(np.asarray(t.data), kind, (shape[0], shape[1]))
        if record is not None:
            return record
        notes.append(f"tensor {t.name}: a {kind} block's 8d + m is not exact in fp32; "
                     "dequantized to float32")  # fmt: skip
    return _dequantize(t, shape)


def _dequantize(t: ReaderTensor, shape: tuple[int, ...]) -> Tensor:
    """One tensor as float32 ``shape`` (in the file's row order)."""
    import gguf

    # A plain ndarray view (see gguf_file): the block dequantizers slice it per row group.
    values = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
    if values.dtype != np.float32:
        values = values.astype(np.float32)  # BF16/F16 dequantize to float32 already; be sure
    if not values.flags.writeable:  # F32 comes back as a view of the read-only file map
        values = values.copy()
    return torch.from_numpy(values).reshape(shape)
