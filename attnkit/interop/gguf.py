"""Read a llama.cpp GGUF file of the Llama architecture: hyper-parameters, tensors, tokenizer.

GGUF (llama.cpp's single-file format) holds typed metadata (the architecture's
hyper-parameters under ``llama.*``, the tokenizer under ``tokenizer.*``) and
tensors, often quantized in blocks. ``read_gguf`` returns a ``GGUFCheckpoint``:

* ``hparams``: a validated ``LlamaHParams`` (names are attnkit's; each field
  says which GGUF key it came from);
* ``tensors``: float32, keyed by Hugging Face Llama names
  (``model.layers.N.self_attn.q_proj.weight``, ...), dequantized by the
  ``gguf`` package's numpy code (the same call Hugging Face's GGUF loader
  makes, so the values agree bit for bit), with llama.cpp's q/k row
  permutation undone (``unpermute_rope_rows``);
* ``tokenizer``: a ``tokenizers.Tokenizer`` rebuilt from the metadata
  (``attnkit.interop.gguf_tokenizer``), plus the special ids and the chat template.

Anything this reader cannot honour exactly (another architecture, a tensor
type outside ``SUPPORTED_TYPES``, RoPE scaling, experts, extra tensors) is a
one-line ``CheckpointError`` naming the file and the field or tensor, never
a silently different model. The interop layer is the only place that knows
GGUF or HF names (ARCHITECTURE.md, principle 8).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from attnkit.errors import CheckpointError
from attnkit.interop.gguf_file import metadata_values, open_gguf
from attnkit.interop.keymap import KeyTable

if TYPE_CHECKING:
    from tokenizers import Tokenizer

SUPPORTED_ARCHITECTURES = ("llama",)
# Plain floats and the classic llama.cpp block formats, all dequantized by gguf-py's numpy
# code. The i-quants, ternary and fp4 formats are left out until a file of each is checked.
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                   "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")  # fmt: skip

# attnkit's special-id names -> tokenizer.ggml.* keys.
_SPECIAL_KEYS = {"bos_id": "bos_token_id", "eos_id": "eos_token_id",
                 "pad_id": "padding_token_id", "unk_id": "unknown_token_id"}  # fmt: skip

_L = r"(\d+)"
# GGUF tensor names -> Hugging Face Llama names (llama.cpp's gguf-py/constants.py names).
GGUF_LLAMA_KEYS: KeyTable = [
    (r"token_embd\.weight", r"model.embed_tokens.weight"),
    (r"output_norm\.weight", r"model.norm.weight"),
    (r"output\.weight", r"lm_head.weight"),
    (rf"blk\.{_L}\.attn_norm\.weight", r"model.layers.\1.input_layernorm.weight"),
    (rf"blk\.{_L}\.attn_([qkv])\.weight", r"model.layers.\1.self_attn.\2_proj.weight"),
    (rf"blk\.{_L}\.attn_output\.weight", r"model.layers.\1.self_attn.o_proj.weight"),
    (rf"blk\.{_L}\.ffn_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (rf"blk\.{_L}\.ffn_(gate|up|down)\.weight", r"model.layers.\1.mlp.\2_proj.weight"),
]


@dataclass(frozen=True)
class LlamaHParams:
    """A Llama's shape, read from ``llama.*`` metadata (the GGUF key beside each field)."""

    num_layers: int  # llama.block_count
    d_model: int  # llama.embedding_length
    num_heads: int  # llama.attention.head_count
    num_kv_heads: int  # llama.attention.head_count_kv (default: head_count)
    d_ff: int  # llama.feed_forward_length
    vocab_size: int  # llama.vocab_size (default: rows of token_embd)
    max_len: int  # llama.context_length
    rope_theta: float  # llama.rope.freq_base (default 10000)
    norm_eps: float  # llama.attention.layer_norm_rms_epsilon, as stored (float32)
    tie_embeddings: bool  # no output.weight tensor: the output reuses token_embd

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


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
    metadata: dict[str, Any] = field(default_factory=dict)  # scalar fields; arrays as lengths


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


# -- metadata ---------------------------------------------------------------------------


class _Fields:
    """Typed access to metadata, every failure naming the file and the key."""

    def __init__(self, path: Path, values: dict[str, Any]) -> None:
        self.path, self.values = path, values

    def error(self, key: str, message: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: {key}: {message}")

    def get(self, key: str, kind: type, default: Any = None) -> Any:
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
        return value

    def positive(self, key: str, default: int | None = None) -> int:
        value = self.get(key, int, default)
        if value < 1:
            raise self.error(key, f"must be >= 1, got {value}")
        return value


def read_llama_hparams(
    path: Path, values: dict[str, Any], tensor_shapes: dict[str, tuple[int, ...]]
) -> LlamaHParams:
    """Validate ``llama.*`` metadata into ``LlamaHParams``; errors name the key."""
    f = _Fields(path, values)
    arch = f.get("general.architecture", str)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise f.error("general.architecture", f"{arch!r} is not supported (supported: llama)")
    num_heads = f.positive("llama.attention.head_count")
    d_model = f.positive("llama.embedding_length")
    num_kv_heads = f.positive("llama.attention.head_count_kv", num_heads)
    if d_model % num_heads != 0 or (d_model // num_heads) % 2 != 0:
        raise f.error(
            "llama.attention.head_count",
            f"embedding_length {d_model} / head_count {num_heads} is not an even head dim",
        )
    if num_heads % num_kv_heads != 0:
        raise f.error(
            "llama.attention.head_count_kv", f"{num_kv_heads} does not divide {num_heads}"
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
    rope_theta = f.get("llama.rope.freq_base", float, 10000.0)
    norm_eps = f.get("llama.attention.layer_norm_rms_epsilon", float)
    if rope_theta <= 0 or norm_eps <= 0:
        key = (
            "llama.rope.freq_base" if rope_theta <= 0 else "llama.attention.layer_norm_rms_epsilon"
        )
        raise f.error(key, f"must be > 0, got {values[key]}")
    embed = tensor_shapes.get("token_embd.weight")
    if embed is None:
        raise CheckpointError(f"{path}: tensor token_embd.weight: missing")
    return LlamaHParams(
        num_layers=f.positive("llama.block_count"),
        d_model=d_model,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        d_ff=f.positive("llama.feed_forward_length"),
        vocab_size=f.positive("llama.vocab_size", embed[0]),
        max_len=f.positive("llama.context_length", 2048),
        rope_theta=rope_theta,
        norm_eps=norm_eps,
        tie_embeddings="output.weight" not in tensor_shapes,
    )


def expected_shapes(hp: LlamaHParams) -> dict[str, tuple[int, ...]]:
    """Every HF Llama tensor the file must hold, with its ``(out, in)`` shape."""
    d, kv = hp.d_model, hp.num_kv_heads * hp.head_dim
    shapes = {"model.embed_tokens.weight": (hp.vocab_size, d), "model.norm.weight": (d,)}
    if not hp.tie_embeddings:
        shapes["lm_head.weight"] = (hp.vocab_size, d)
    for i in range(hp.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (d, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, d),
            p + "post_attention_layernorm.weight": (d,),
            p + "mlp.gate_proj.weight": (hp.d_ff, d),
            p + "mlp.up_proj.weight": (hp.d_ff, d),
            p + "mlp.down_proj.weight": (d, hp.d_ff),
        }
    return shapes


# -- the file ---------------------------------------------------------------------------


def read_gguf(
    path: str | os.PathLike[str],
    *,
    tensors: bool = True,
    tokenizer: bool = True,
    pre_tokenizer: str | None = None,
) -> GGUFCheckpoint:
    """Read a Llama GGUF file (see the module doc).

    Args:
        tensors: dequantize the tensors (skip for metadata only).
        tokenizer: build the tokenizer from the metadata.
        pre_tokenizer: override ``tokenizer.ggml.pre`` (see
            ``attnkit.interop.gguf_tokenizer.PRE_TOKENIZERS``).
    """
    path = Path(path)
    reader = open_gguf(path)
    values = metadata_values(path, reader)
    shapes = {t.name: tuple(int(n) for n in reversed(t.shape.tolist())) for t in reader.tensors}
    hparams = read_llama_hparams(path, values, shapes)

    table = [(re.compile(f"^{pattern}$"), template) for pattern, template in GGUF_LLAMA_KEYS]
    expected = expected_shapes(hparams)
    renamed: dict[str, Any] = {}
    for t in reader.tensors:
        hf_name = next((p.sub(tpl, t.name) for p, tpl in table if p.match(t.name)), None)
        if hf_name is None or hf_name not in expected:
            raise CheckpointError(f"{path}: tensor {t.name}: not part of a plain Llama")
        kind = t.tensor_type.name
        if kind not in SUPPORTED_TYPES:
            raise CheckpointError(
                f"{path}: tensor {t.name}: ggml type {kind} is not supported "
                f"(supported: {', '.join(SUPPORTED_TYPES)})"
            )
        if shapes[t.name] != expected[hf_name]:
            raise CheckpointError(
                f"{path}: tensor {t.name}: shape {shapes[t.name]}, expected {expected[hf_name]} "
                "from the llama.* metadata"
            )
        renamed[hf_name] = t
    missing = [name for name in expected if name not in renamed]
    if missing:
        raise CheckpointError(f"{path}: tensors missing: {', '.join(missing[:4])}")

    out: dict[str, Tensor] = {}
    if tensors:
        for hf_name, t in renamed.items():
            out[hf_name] = _dequantize(t, expected[hf_name], hparams)

    tok = None
    if tokenizer:
        from attnkit.interop.gguf_tokenizer import build_tokenizer

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
        architecture=values["general.architecture"],
        hparams=hparams,
        tensors=out,
        tensor_types={name: t.tensor_type.name for name, t in renamed.items()},
        tokenizer=tok,
        special_ids=specials,
        chat_template=values.get("tokenizer.chat_template"),
        metadata=scalars,
    )


def _dequantize(t: Any, shape: tuple[int, ...], hp: LlamaHParams) -> Tensor:
    """One tensor as float32 ``shape``, q/k rows back in HF's rotate-half layout."""
    import gguf

    # A plain ndarray view (see gguf_file): the block dequantizers slice it per row group.
    values = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
    if values.dtype != np.float32:
        values = values.astype(np.float32)  # BF16/F16 dequantize to float32 already; be sure
    if not values.flags.writeable:  # F32 comes back as a view of the read-only file map
        values = values.copy()
    weight = torch.from_numpy(values).reshape(shape)
    if t.name.endswith(".attn_q.weight"):
        weight = unpermute_rope_rows(weight, hp.num_heads)
    elif t.name.endswith(".attn_k.weight"):
        weight = unpermute_rope_rows(weight, hp.num_kv_heads)
    return weight.contiguous()
