"""Hugging Face ``LlamaForCausalLM`` directories -> attnkit ``DecoderOnlyLM``.

The same path as a GGUF Llama (``attnkit.interop.llama``): ``config.json``
becomes a ``LlamaHParams`` (``HF_LLAMA_FIELDS`` names the field behind each
size), the tensors go through ``LLAMA_KEYS`` (q, k, v stacked into the fused
``qkv_proj``; HF's rows are already in the rotate-half layout attnkit's
rotary positions use), and the config is the ``"llama"`` preset with the
file's shape:

* ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
  ``num_key_value_heads`` (default: the heads), ``intermediate_size``,
  ``vocab_size``, ``max_position_embeddings``, ``rms_norm_eps``, the RoPE base
  (``rope_parameters.rope_theta`` in transformers 5, ``rope_theta`` before;
  default 10000), ``tie_word_embeddings`` (default false, as ``LlamaConfig``);
* refused, naming the field: ``hidden_act`` other than ``silu`` (SwiGLU),
  ``attention_bias`` or ``mlp_bias``, a ``head_dim`` other than
  ``hidden_size / num_attention_heads``, RoPE scaling (a ``rope_type`` other
  than ``"default"``, or ``rope_scaling``);
* special ids: ``bos_token_id``, ``eos_token_id`` (a list: the first that
  fits), ``pad_token_id``, then ``tokenizer_config.json``'s unknown token,
  picked as for GGUF (``llama.llama_ids``);
* the tokenizer: ``tokenizer.json`` with ``tokenizer_config.json``'s
  ``chat_template``; ``decode`` skips what ``skip_special_tokens`` skips.
"""

from __future__ import annotations

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.interop.conventions import activation_from_hf
from attnkit.interop.hf.files import (
    CONFIG,
    HFDirectory,
    map_weights,
    read_tokenizer,
    read_weights,
    special_token,
)
from attnkit.interop.import_writer import Imported
from attnkit.interop.llama import LlamaHParams, llama_config, llama_dims, llama_ids, llama_keys

# LlamaHParams field -> the config.json field it is read from (for messages).
HF_LLAMA_FIELDS = {"num_layers": "num_hidden_layers", "d_model": "hidden_size",
                   "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads",
                   "d_ff": "intermediate_size", "vocab_size": "vocab_size",
                   "max_len": "max_position_embeddings", "rope_theta": "rope_theta",
                   "norm_eps": "rms_norm_eps"}  # fmt: skip


def _rope_theta(d: HFDirectory) -> float:
    """The RoPE base; any scaling is refused (attnkit's rotary positions are plain)."""
    params = d.get("rope_parameters", {})
    if not isinstance(params, dict):
        raise d.error("rope_parameters", f"expected an object, got {params!r}")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise d.error("rope_parameters", f"RoPE scaling ({kind!r}) is not supported")
    if d.get("rope_scaling") is not None:
        raise d.error("rope_scaling", f"RoPE scaling is not supported ({d.config['rope_scaling']})")
    theta = params.get("rope_theta", d.get("rope_theta", 10000.0))
    ok = isinstance(theta, int | float) and not isinstance(theta, bool)
    if not ok:
        raise d.error("rope_theta", f"expected a number, got {theta!r}")
    return float(theta)


def llama_hparams(d: HFDirectory) -> LlamaHParams:
    """``config.json`` as ``LlamaHParams``; what attnkit's Llama cannot express is refused."""
    activation_from_hf(d.get("hidden_act", "silu"), f"{d.file(CONFIG)}: hidden_act", gated=True)
    for flag in ("attention_bias", "mlp_bias"):
        if d.get(flag, False):
            raise d.error(flag, "true is not supported (attnkit's Llama has no biases)")
    heads, width = d.integer("num_attention_heads"), d.integer("hidden_size")
    head_dim = d.get("head_dim")
    if head_dim is not None and head_dim * heads != width:
        raise d.error("head_dim", f"{head_dim} x {heads} heads is not hidden_size {width}; "
                      "attnkit's head dim is hidden_size / num_attention_heads")  # fmt: skip
    hp = LlamaHParams(
        num_layers=d.integer("num_hidden_layers"),
        d_model=width,
        num_heads=heads,
        num_kv_heads=d.integer("num_key_value_heads", heads),
        d_ff=d.integer("intermediate_size"),
        vocab_size=d.integer("vocab_size"),
        max_len=d.integer("max_position_embeddings"),
        rope_theta=_rope_theta(d),
        norm_eps=d.number("rms_norm_eps", 1e-6),
        tie_embeddings=bool(d.get("tie_word_embeddings", False)),
    )
    hp.check(HF_LLAMA_FIELDS, str(d.file(CONFIG)))
    return hp


def import_llama(d: HFDirectory) -> Imported:
    """The attnkit config, state dict, tokenizer and notes of a Llama directory."""
    hp = llama_hparams(d)
    hf = read_tokenizer(d)
    unk_token = special_token(d, "unk_token")
    unk = None if unk_token is None else hf.token_to_id(unk_token)
    file_ids = {"bos_id": d.get("bos_token_id"), "eos_id": d.get("eos_token_id"),
                "pad_id": d.get("pad_token_id"), "unk_id": unk}  # fmt: skip
    _, notes = llama_ids(hp, file_ids, str(d.file(CONFIG)))
    config = llama_config(hp, file_ids)
    template = d.tokenizer_config.get("chat_template")
    tokenizer = PretrainedTokenizer.with_special_skipped(
        hf, pad_id=config.pad_id, bos_id=config.bos_id, eos_id=config.eos_id, unk_id=unk,
        chat_template=template if isinstance(template, str) else None,
    )  # fmt: skip
    dims = llama_dims(hp, HF_LLAMA_FIELDS, CONFIG)
    state = map_weights(d, read_weights(d), llama_keys(hp), dims)
    hp.check_positions(HF_LLAMA_FIELDS, str(d.file(CONFIG)))
    details = {"architectures": d.config.get("architectures"), "file_special_ids": file_ids}
    return Imported(config, state, tokenizer, "hf", "llama", notes, details)
