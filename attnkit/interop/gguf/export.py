"""``attnkit export --to gguf``: a Llama-type ``DecoderOnlyLM`` as one llama.cpp GGUF file.

The file is what llama.cpp's own converter writes for a Hugging Face Llama,
so llama.cpp and what is built on it (Ollama, LM Studio) run it, and
``attnkit import --from gguf`` reads it back to the same model:

* **Which models.** A decoder-only config that the ``"llama"`` architecture
  expresses: the ``"llama"`` preset's options (``LLAMA_EXPRESSIBLE``: rotary
  positions, RMSNorm, pre-norm, SwiGLU, no biases, unscaled embeddings, dense
  attention and FFN) with any shape, grouped-query heads and a tied or untied
  output. Anything else is a one-line ``UsageError`` naming the config field
  (learned positions, LayerNorm, ...): llama.cpp would run another function.
* **Tensors.** The import's key tables run backwards (``keymap.save_state``):
  ``LLAMA_KEYS`` splits attnkit's fused ``qkv_proj`` into Hugging Face's q, k,
  v; ``GGUF_LLAMA_KEYS`` renames to llama.cpp's names and permutes the q/k
  rows into llama.cpp's RoPE order. No second key map lives here.
* **Precision** (``PRECISIONS``): ``f32``; ``f16``; ``q8_0``, ``q4_0`` and
  ``q4_1`` (llama.cpp's 32-weight blocks with one scale, and a minimum for
  ``q4_1``, quantized by the ``gguf`` package's numpy code; its k-quants are not
  implemented there). As llama.cpp's converter does, the 1-D norm weights stay
  f32, and a matrix whose rows do not split into 32-weight blocks falls back to f16.
* **Block checkpoints** (``import --from gguf --keep-quantized``:
  ``attnkit.checkpoints.int4_weights``): at ``q4_0``/``q4_1`` each int4 linear's
  groups of 32 are written as the blocks they are, and at ``q8_0`` each int8-block
  linear's, byte for byte what the imported file held
  (``attnkit.interop.gguf.blocks.to_blocks``), where the type holds them exactly
  (``q4_0``: groups without a zero term); a linear it cannot hold is quantized
  from its exact float weights, as is every linear at the other precisions.
* **Metadata.** ``llama.*`` (context and embedding length, block count,
  feed-forward length, head counts, RoPE base and dimension, RMS epsilon,
  vocabulary size) and ``general.file_type``.
* **Tokenizer.** A byte-level BPE (``tokenizer.ggml.model = "gpt2"``: a GGUF
  import such as SmolLM2's, or a fine-tune of one): tokens, token types
  (control for special added tokens, user-defined for other added ones),
  merges, the pre-tokenizer's llama.cpp name (``gguf.tokenizer.PRE_TOKENIZERS``),
  BOS/EOS/pad/unknown ids, whether encoding adds BOS/EOS, and the chat
  template when the tokenizer has one. Another tokenizer (attnkit's Metaspace
  BPE, characters, words, SentencePiece) is a one-line ``UsageError``: it has
  no llama.cpp tokenizer model that splits text the same way.

The file is written through the output-path policy (``attnkit.output_paths.atomic_file``):
to a hidden temporary beside ``out``, renamed over it only when complete.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import Tensor

from attnkit import jsonio
from attnkit.checkpoints.loading import LoadedModel
from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import UsageError
from attnkit.interop.gguf.blocks import (
    BLOCK,
    KEPT_TYPES,
    dequantize_record,
    is_record,
    make_q8_record,
    make_record,
    to_blocks,
)
from attnkit.interop.gguf.read import GGUF_FIELDS, GGUF_LLAMA_KEYS, GGUF_SOURCE
from attnkit.interop.gguf.tokenizer import (
    LLAMA_CPP_NAMES,
    PRE_TOKENIZERS,
    TOKEN_CONTROL,
    TOKEN_NORMAL,
    TOKEN_USER_DEFINED,
)
from attnkit.interop.keymap import save_state
from attnkit.interop.llama import LlamaHParams, llama_dims, llama_keys
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.models.presets import LLAMA_OPTIONS
from attnkit.output_paths import atomic_file
from attnkit.quantize.int4 import dequantize_groups, unpack_nibbles

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType

# --precision -> (ggml type of the matrices, llama.cpp's general.file_type name).
PRECISIONS = {"f32": ("F32", "ALL_F32"), "f16": ("F16", "MOSTLY_F16"),
              "q8_0": ("Q8_0", "MOSTLY_Q8_0"), "q4_0": ("Q4_0", "MOSTLY_Q4_0"),
              "q4_1": ("Q4_1", "MOSTLY_Q4_1")}  # fmt: skip

# Config fields the "llama" architecture fixes, with the value it fixes them to (the
# "llama" preset's). Dropout and the fields of unused variants change nothing at inference.
LLAMA_EXPRESSIBLE = {
    **{k: v for k, v in LLAMA_OPTIONS.items() if "dropout" not in k and k != "norm_eps"},
    "embedding_norm": False,
    "attention": "dense",
    "ffn": "dense",
    "attention_score": "scaled_dot",
}
TOKEN_UNUSED = 5  # llama.cpp's type for rows the model has past the tokenizer's vocabulary


def check_expressible(config: object) -> DecoderOnlyConfig:
    """``config`` if GGUF's ``llama`` architecture runs the same function; else a one-line
    ``UsageError`` naming the first field it cannot express."""
    if not isinstance(config, DecoderOnlyConfig):
        family = getattr(config, "family", type(config).__name__)
        raise UsageError(f"family: {family!r}; --to gguf exports decoder-only models")
    for name, wanted in LLAMA_EXPRESSIBLE.items():
        value = getattr(config, name)
        if value != wanted:
            raise UsageError(
                f"{name}: {value!r} is not expressible in GGUF's llama architecture "
                f"(it needs {name}={wanted!r}, as the 'llama' preset)"
            )
    return config


def llama_hparams(config: DecoderOnlyConfig) -> LlamaHParams:
    """The Llama shape of ``config`` (the inverse of ``llama.llama_config``)."""
    return LlamaHParams(
        num_layers=config.num_layers, d_model=config.d_model, num_heads=config.num_heads,
        num_kv_heads=config.kv_heads, d_ff=config.d_ff, vocab_size=config.vocab_size,
        max_len=config.max_len, rope_theta=config.rope_theta, norm_eps=config.norm_eps,
        tie_embeddings=config.tie_embeddings,
    )  # fmt: skip


def blocks_as_weights(state: dict[str, Tensor], *, records: str) -> dict[str, Tensor]:
    """``state`` with each block linear's stored form as its ``weight``: an int4 linear's
    (``weight_int4``, ``weight_scale``, ``weight_zero``) a record of its blocks
    (``blocks``) where ``records == "q4"`` and its groups are of 32, an int8-block
    linear's (``weight_int8``, ``weight_scale``) a Q8 record where ``records == "q8"``;
    else the exact float weight."""
    out = dict(state)
    for key in [k for k in state if k.endswith(".weight_int8")]:
        name = key[: -len("_int8")]
        q8 = make_q8_record(out.pop(key), out.pop(f"{name}_scale"))
        out[name] = q8 if records == "q8" else dequantize_record(q8)
    for key in [k for k in state if k.endswith(".weight_int4")]:
        name = key[: -len("_int4")]
        q = unpack_nibbles(out.pop(key))
        scale, zero = out.pop(f"{name}_scale"), out.pop(f"{name}_zero")
        grouped = q.size(1) == scale.size(1) * BLOCK
        out[name] = make_record(q, scale, zero) if records == "q4" and grouped else (
            dequantize_groups(q, scale.float(), zero.float()))  # fmt: skip
    return out


def gguf_tensors(state: dict[str, Tensor], hp: LlamaHParams) -> dict[str, Tensor]:
    """attnkit's state dict -> llama.cpp's tensors: the import's two tables, backwards
    (records of blocks move as their weights would: ``blocks_as_weights``)."""
    hf = save_state(llama_keys(hp), state, llama_dims(hp))
    table = GGUF_LLAMA_KEYS.without(["lm_head.weight"]) if hp.tie_embeddings else GGUF_LLAMA_KEYS
    return save_state(table, hf, llama_dims(hp, GGUF_FIELDS, GGUF_SOURCE))


# -- tokenizer ----------------------------------------------------------------------------


@dataclass
class GGUFVocab:
    """The ``tokenizer.*`` metadata of a byte-level BPE (see the module doc)."""

    tokens: list[str]
    types: list[int]
    merges: list[str]
    pre: str
    add_space_prefix: bool
    add_bos: bool
    add_eos: bool
    unk_id: int | None
    chat_template: str | None


def _pieces(pre_tokenizer: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A pre-tokenizer's JSON as its list of pieces (Sequences flattened), without what
    changes offsets only (``trim_offsets``)."""
    if pre_tokenizer is None:
        return []
    if pre_tokenizer.get("type") == "Sequence":
        return [p for piece in pre_tokenizer["pretokenizers"] for p in _pieces(piece)]
    return [{k: v for k, v in pre_tokenizer.items() if k != "trim_offsets"}]


def _pre_name(pre_tokenizer: dict[str, Any] | None) -> tuple[str, bool]:
    """The ``PRE_TOKENIZERS`` name splitting text as ``pre_tokenizer`` does, and whether
    its byte-level step adds a space first (``tokenizer.ggml.add_space_prefix``)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    ours = _pieces(pre_tokenizer)
    space = bool(ours) and ours[-1].get("type") == "ByteLevel" and ours[-1]["add_prefix_space"]
    if space:  # gguf_tokenizer.build_tokenizer turns it on from add_space_prefix
        ours[-1]["add_prefix_space"] = False
    for name, build in PRE_TOKENIZERS.items():
        probe = Tokenizer(models.BPE())
        probe.pre_tokenizer = pre_tokenizers.Sequence(build())
        if _pieces(json.loads(probe.to_str())["pre_tokenizer"]) == ours:
            return name, space
    raise UsageError(
        f"tokenizer: pre-tokenizer {jsonio.dumps(pre_tokenizer)} has no llama.cpp name "
        f"(GGUF export knows {', '.join(PRE_TOKENIZERS)})"
    )


def gguf_vocab(tokenizer: object, vocab_size: int) -> GGUFVocab:
    """The GGUF tokenizer of ``tokenizer`` for a model of ``vocab_size`` rows; a tokenizer
    llama.cpp cannot reproduce is a one-line ``UsageError``."""
    if not isinstance(tokenizer, PretrainedTokenizer):
        kind = getattr(tokenizer, "kind", type(tokenizer).__name__)
        raise UsageError(
            f"tokenizer: kind {kind!r} has no llama.cpp tokenizer model; --to gguf needs a "
            "byte-level BPE (a model imported with attnkit import --from gguf, or trained from one)"
        )
    hf = tokenizer.hf_tokenizer
    data = json.loads(hf.to_str())
    model = data["model"]
    if model.get("type") != "BPE" or model.get("byte_fallback") or model.get("ignore_merges"):
        raise UsageError(f"tokenizer: model {model.get('type')!r} is not a plain byte-level BPE")
    if data.get("normalizer") is not None:
        raise UsageError(f"tokenizer: normalizer {data['normalizer'].get('type')!r} has no "
                         "llama.cpp counterpart")  # fmt: skip
    pre, space = _pre_name(data.get("pre_tokenizer"))
    vocab = hf.get_vocab(with_added_tokens=True)
    size = len(vocab)
    if size > vocab_size or sorted(vocab.values()) != list(range(size)):
        raise UsageError(
            f"tokenizer: {size} tokens (ids {min(vocab.values())}..{max(vocab.values())}) "
            f"do not index the model's vocab_size {vocab_size} rows"
        )
    tokens = [""] * size
    for token, i in vocab.items():
        tokens[i] = token
    types = [TOKEN_NORMAL] * size
    for i, added in hf.get_added_tokens_decoder().items():
        types[i] = TOKEN_CONTROL if added.special else TOKEN_USER_DEFINED
    # rows of the model no token uses: llama.cpp's converter names them [PAD<id>]
    tokens += [f"[PAD{i}]" for i in range(size, vocab_size)]
    types += [TOKEN_UNUSED] * (vocab_size - size)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    # what the file's encode adds around a text: llama.cpp's add_bos_token/add_eos_token
    plain = hf.encode("a", add_special_tokens=False).ids
    full = hf.encode("a", add_special_tokens=True).ids
    extra = len(full) > len(plain)
    add_bos = extra and full[0] == tokenizer.bos_id and full[1 : len(plain) + 1] == plain
    add_eos = extra and full[-1] == tokenizer.eos_id and full[-len(plain) - 1 : -1] == plain
    return GGUFVocab(tokens, types, merges, pre, space, add_bos, add_eos, tokenizer.unk_id,
                     tokenizer.chat_template or None)  # fmt: skip


# -- the file -----------------------------------------------------------------------------


def _array(
    tensor: Tensor, qtype: GGMLQuantizationType, gguf: ModuleType
) -> tuple[np.ndarray, GGMLQuantizationType | None]:
    """``tensor`` as what ``GGUFWriter.add_tensor`` takes: an array and its raw ggml type
    (None: the array's own float type). A record of blocks is written as its blocks
    where ``qtype`` holds them exactly, else as its float weight."""
    if is_record(tensor):
        blocks = to_blocks(tensor, qtype.name) if qtype.name in KEPT_TYPES else None
        if blocks is not None:
            return blocks, qtype
        tensor = dequantize_record(tensor)
    values = tensor.detach().to("cpu").float().contiguous().numpy()
    kind = gguf.GGMLQuantizationType
    if values.ndim == 1 or qtype == kind.F32:
        return values, None
    if qtype == kind.F16:
        return values.astype(np.float16), None
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if values.shape[-1] % block != 0:  # llama.cpp's converter falls back the same way
        return values.astype(np.float16), None
    return gguf.quants.quantize(values, qtype), qtype


def _need_gguf() -> ModuleType:
    try:
        import gguf
    except ImportError:
        raise UsageError("export --to gguf needs the gguf package: pip install gguf") from None
    return gguf


def export_gguf(
    loaded: LoadedModel,
    out: Path,
    *,
    overwrite: bool = False,
    precision: str = "f32",
    inputs: tuple[Path, ...] = (),
) -> Path:
    """Write ``loaded`` as the GGUF file ``out`` (see the module doc); returns ``out``.

    Args:
        overwrite: replace ``out`` if it exists (else a ``UsageError``).
        precision: a ``PRECISIONS`` name.
        inputs: the command's inputs, which ``out`` may not be.
    """
    gguf = _need_gguf()
    if precision not in PRECISIONS:
        raise UsageError(f"--precision: {precision!r}; choose from {', '.join(PRECISIONS)}")
    if Path(out).exists() and not overwrite:
        raise UsageError(f"--out {out}: already exists; pass --overwrite to replace it")
    config = check_expressible(loaded.model.config)
    hp = llama_hparams(config)
    vocab = gguf_vocab(loaded.tokenizer, hp.vocab_size)
    records = {"q4_0": "q4", "q4_1": "q4", "q8_0": "q8"}.get(precision, "")
    state = blocks_as_weights(loaded.model.state_dict(), records=records)
    tensors = gguf_tensors(state, hp)
    type_name, file_type = PRECISIONS[precision]
    qtype = gguf.GGMLQuantizationType[type_name]

    with atomic_file(out, option="--out", inputs=inputs) as tmp:
        writer = gguf.GGUFWriter(tmp, "llama")
        keys = {**_llama_keys(hp, _run_name(loaded.directory)), **_vocab_keys(vocab, config)}
        keys["file_type"] = int(gguf.LlamaFileType[file_type])
        if precision.startswith("q"):
            keys["quantization_version"] = gguf.GGML_QUANT_VERSION
        for name, value in keys.items():  # GGUFWriter.add_<name>: gguf's own key names
            if value is not None:
                getattr(writer, f"add_{name}")(value)
        for name, tensor in tensors.items():
            array, raw = _array(tensor, qtype, gguf)
            writer.add_tensor(name, array, raw_dtype=raw)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return Path(out)


def _run_name(directory: Path) -> str:
    """``runs/smollm2`` for its checkpoint ``runs/smollm2/checkpoints/step_00000000``."""
    directory = Path(directory)
    in_run = directory.parent.name == "checkpoints"
    return directory.parent.parent.name if in_run else directory.name


def _llama_keys(hp: LlamaHParams, name: str) -> dict[str, object]:
    """``general.*`` and ``llama.*`` (by ``GGUFWriter.add_*`` name)."""
    return {
        "type": "model", "name": name, "context_length": hp.max_len,
        "embedding_length": hp.d_model, "block_count": hp.num_layers,
        "feed_forward_length": hp.d_ff, "head_count": hp.num_heads,
        "head_count_kv": hp.num_kv_heads, "rope_dimension_count": hp.head_dim,
        "rope_freq_base": hp.rope_theta, "layer_norm_rms_eps": hp.norm_eps,
        "vocab_size": hp.vocab_size,
    }  # fmt: skip


def _vocab_keys(vocab: GGUFVocab, config: DecoderOnlyConfig) -> dict[str, object]:
    """``tokenizer.*`` (by ``GGUFWriter.add_*`` name); the special ids are the model's
    (its config's), the unknown token the tokenizer's; None: not written."""
    return {
        "tokenizer_model": "gpt2", "tokenizer_pre": LLAMA_CPP_NAMES[vocab.pre],
        "token_list": vocab.tokens, "token_types": vocab.types, "token_merges": vocab.merges,
        "bos_token_id": config.bos_id, "eos_token_id": config.eos_id,
        "pad_token_id": config.pad_id, "unk_token_id": vocab.unk_id,
        "add_bos_token": vocab.add_bos, "add_eos_token": vocab.add_eos,
        "add_space_prefix": vocab.add_space_prefix, "chat_template": vocab.chat_template,
    }  # fmt: skip
