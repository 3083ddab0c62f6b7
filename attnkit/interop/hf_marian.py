"""Copy an attnkit ``EncoderDecoder`` into Hugging Face ``MarianMTModel``.

Marian (as ported to ``transformers``) is the paper's post-LN encoder-decoder:
``sqrt(D)``-scaled embeddings plus fixed sinusoids, separate q/k/v
projections, a ``final_logits_bias`` and optionally tied embeddings. It is
the reference for the ``test_against_hf`` parity tests (litgpt-style): same
weights, dropout off, and the logits must agree.

**Sinusoid layout.** The paper (§3.5) and attnkit interleave the table:
``PE[:, 2i] = sin``, ``PE[:, 2i+1] = cos``. Marian puts all the sines in the
first half and all the cosines in the second: ``PE_marian = PE_ours[:, perm]``
with ``perm = [0, 2, 4, ..., 1, 3, 5, ...]``. Two ways to make both models
compute the same function (``permute_dims``):

* ``True`` (default): permute the model dimension of every weight that reads
  or writes the residual stream (embeddings, q/k/v/fc1 inputs, out_proj/fc2
  outputs, LayerNorms; LayerNorm statistics do not depend on the order). HF
  keeps its own table, so the result is a genuine Marian model that survives
  ``save_pretrained``/``from_pretrained``. Its hidden states equal ours with
  the dimensions permuted; logits are identical.
* ``False``: keep our dimension order and overwrite HF's position weights with
  attnkit's interleaved table. Hidden states line up with ours dimension by
  dimension (handy when comparing layer by layer), but HF neither saves
  those weights nor loads them (``_keys_to_ignore_on_save``): a reloaded
  model gets Marian's own table back and is no longer the same function.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from attnkit.errors import ConfigError
from attnkit.interop.keymap import KeyTable, check_keys, rename_keys
from attnkit.models.config import TransformerConfig
from attnkit.models.encoder_decoder import EncoderDecoder

if TYPE_CHECKING:
    from transformers import MarianConfig, MarianMTModel

_L = r"(\d+)"
_WB = r"(weight|bias)"
# Applied after our fused qkv_proj is split into q_proj/k_proj/v_proj (see _split_qkv).
HF_MARIAN_KEYS: KeyTable = [
    (r"src_embed\.tokens\.weight", r"model.encoder.embed_tokens.weight"),
    (r"tgt_embed\.tokens\.weight", r"model.decoder.embed_tokens.weight"),
    (r"output_proj\.weight", r"lm_head.weight"),
    (rf"encoder\.layers\.{_L}\.self_attn\.([qkv]|out)_proj\.{_WB}",
     r"model.encoder.layers.\1.self_attn.\2_proj.\3"),
    (rf"encoder\.layers\.{_L}\.self_attn_residual\.norm\.{_WB}",
     r"model.encoder.layers.\1.self_attn_layer_norm.\2"),
    (rf"encoder\.layers\.{_L}\.ffn\.w([12])\.{_WB}", r"model.encoder.layers.\1.fc\2.\3"),
    (rf"encoder\.layers\.{_L}\.ffn_residual\.norm\.{_WB}",
     r"model.encoder.layers.\1.final_layer_norm.\2"),
    (rf"decoder\.layers\.{_L}\.self_attn\.([qkv]|out)_proj\.{_WB}",
     r"model.decoder.layers.\1.self_attn.\2_proj.\3"),
    (rf"decoder\.layers\.{_L}\.self_attn_residual\.norm\.{_WB}",
     r"model.decoder.layers.\1.self_attn_layer_norm.\2"),
    (rf"decoder\.layers\.{_L}\.cross_attn\.([qkv]|out)_proj\.{_WB}",
     r"model.decoder.layers.\1.encoder_attn.\2_proj.\3"),
    (rf"decoder\.layers\.{_L}\.cross_attn_residual\.norm\.{_WB}",
     r"model.decoder.layers.\1.encoder_attn_layer_norm.\2"),
    (rf"decoder\.layers\.{_L}\.ffn\.w([12])\.{_WB}", r"model.decoder.layers.\1.fc\2.\3"),
    (rf"decoder\.layers\.{_L}\.ffn_residual\.norm\.{_WB}",
     r"model.decoder.layers.\1.final_layer_norm.\2"),
]  # fmt: skip

# HF tensors whose dim 1 (inputs) / dim 0 (outputs) is the residual stream.
_READS_STREAM = re.compile(r".*(embed_tokens|shared|lm_head|[qkv]_proj|fc1)\.weight")
_WRITES_STREAM = re.compile(r".*(out_proj|fc2|layer_norm)\.(weight|bias)")


def _split_qkv(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """``...qkv_proj.{weight,bias}`` ``(3D, ...)`` -> ``...{q,k,v}_proj.*`` ``(D, ...)`` each;
    cross-attention's ``...kv_proj.*`` ``(2D, ...)`` -> ``...{k,v}_proj.*``."""
    out = {}
    for key, value in state.items():
        if ".qkv_proj." in key:
            for name, part in zip("qkv", value.chunk(3, dim=0)):
                out[key.replace(".qkv_proj.", f".{name}_proj.")] = part
        elif ".kv_proj." in key:
            for name, part in zip("kv", value.chunk(2, dim=0)):
                out[key.replace(".kv_proj.", f".{name}_proj.")] = part
        else:
            out[key] = value
    return out


def interleaved_to_halves(d_model: int) -> Tensor:
    """``perm`` with ``PE_marian == PE_attnkit[:, perm]``: even dims first, then odd."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


# attnkit activation -> HF ``activation_function`` (HF "gelu" is the exact erf GELU, as
# F.gelu; "gelu_pytorch_tanh" is F.gelu(approximate="tanh"), GPT-2's).
MARIAN_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh"}
# Marian's LayerNorms are nn.LayerNorm(d_model): eps is fixed at 1e-5.
MARIAN_NORM_EPS = 1e-5


def check_marian_expressible(c: Any) -> None:
    """Raise ``ConfigError`` naming the first field ``MarianMTModel`` cannot express.

    Marian is the paper's model: post-LN LayerNorm (eps 1e-5), fixed sinusoids,
    full multi-head attention with biases, a dense ReLU/GELU FFN, no norm
    after the embeddings. Bias-free projections are fine (exported as zeros).
    """
    if not isinstance(c, TransformerConfig):
        family = getattr(c, "family", type(c).__name__)
        raise ConfigError(
            f"family: only Transformer (encoder-decoder) checkpoints map to MarianMTModel; "
            f"this is a {family!r} checkpoint"
        )
    wanted: list[tuple[str, Any, Any]] = [
        ("norm_position", c.norm_position, "post"),
        ("positions", c.positions, "sinusoidal"),
        ("norm", c.norm, "layernorm"),
        ("attention_score", c.attention_score, "scaled_dot"),
        ("attention", c.attention, "dense"),
        ("ffn", c.ffn, "dense"),
        ("embedding_norm", c.embedding_norm, False),
        ("num_kv_heads", c.kv_heads, c.num_heads),
    ]
    for field, got, expected in wanted:
        if got != expected:
            raise ConfigError(
                f"{field}: MarianMTModel needs {field}={expected!r}; this model has "
                f"{got!r}, which transformers' Marian cannot express"
            )
    if c.activation not in MARIAN_ACTIVATIONS:
        raise ConfigError(
            f"activation: MarianMTModel has a two-matrix FFN ({', '.join(MARIAN_ACTIVATIONS)}); "
            f"cannot express activation={c.activation!r}"
        )
    if abs(c.norm_eps - MARIAN_NORM_EPS) > 1e-12:
        raise ConfigError(
            f"norm_eps: Marian's LayerNorms use eps {MARIAN_NORM_EPS}; this model has {c.norm_eps}"
        )


def hf_marian_config(c: TransformerConfig, attn_implementation: str = "sdpa") -> MarianConfig:
    """A ``MarianConfig`` with ``c``'s sizes, ids and tying.

    Raises ``ConfigError`` (a ``ValueError``) naming the field of a variant
    Marian cannot express (``check_marian_expressible``).
    """
    from transformers import MarianConfig

    check_marian_expressible(c)
    # HF ties lm_head to the decoder embedding only when tie_word_embeddings, and
    # shares encoder/decoder embeddings only when both flags are set.
    return MarianConfig(  # type: ignore[call-arg]  # attn_implementation goes to the base
        vocab_size=c.src_vocab_size,
        decoder_vocab_size=c.tgt_vocab_size,
        share_encoder_decoder_embeddings=c.share_embeddings == "all",
        tie_word_embeddings=c.share_embeddings in ("decoder", "all"),
        d_model=c.d_model,
        encoder_layers=c.num_encoder_layers,
        decoder_layers=c.num_decoder_layers,
        encoder_attention_heads=c.num_heads,
        decoder_attention_heads=c.num_heads,
        encoder_ffn_dim=c.d_ff,
        decoder_ffn_dim=c.d_ff,
        activation_function=MARIAN_ACTIVATIONS[c.activation],
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        activation_dropout=0.0,  # attnkit has no dropout inside the FFN
        scale_embedding=c.scale_embeddings,
        max_position_embeddings=c.max_len,
        pad_token_id=c.pad_id,
        bos_token_id=c.bos_id,
        eos_token_id=c.eos_id,
        forced_eos_token_id=c.eos_id,
        decoder_start_token_id=c.bos_id,  # attnkit targets start with BOS
        attn_implementation=attn_implementation,
    )


def to_hf_marian(
    model: EncoderDecoder, *, permute_dims: bool = True, attn_implementation: str = "sdpa"
) -> MarianMTModel:
    """A ``transformers.MarianMTModel`` holding a copy of ``model``'s weights.

    ``model(src, tgt).logits`` equals ``hf(input_ids=src, attention_mask=src != pad,
    decoder_input_ids=tgt, decoder_attention_mask=tgt != pad).logits`` at every
    real target position (see the module docstring for ``permute_dims``).
    Raises ``ConfigError`` (a ``ValueError``) naming the field of a variant
    Marian cannot express (pre-LN, learned positions, RMSNorm, SwiGLU, GQA,
    ...). Needs ``transformers``.
    """
    from transformers import MarianMTModel

    config = hf_marian_config(model.config, attn_implementation)
    hf = MarianMTModel(config)
    hf_state = hf.state_dict()

    mapped = rename_keys(_split_qkv(model.state_dict()), HF_MARIAN_KEYS)
    if "model.shared.weight" in hf_state:
        mapped["model.shared.weight"] = mapped["model.encoder.embed_tokens.weight"]
    if permute_dims:
        perm = interleaved_to_halves(model.config.d_model).to(next(model.parameters()).device)
        for key, value in mapped.items():
            if _READS_STREAM.fullmatch(key):
                mapped[key] = value[:, perm]
            elif _WRITES_STREAM.fullmatch(key):
                mapped[key] = value[perm]
    for side, embed in (("encoder", model.src_embed), ("decoder", model.tgt_embed)):
        key = f"model.{side}.embed_positions.weight"
        positions: Any = embed.positions  # sinusoidal (checked above)
        mapped[key] = hf_state[key] if permute_dims else positions.table
    mapped["final_logits_bias"] = torch.zeros_like(hf_state["final_logits_bias"])

    if not model.config.bias:  # Marian always has biases: zeros compute the same function
        for key, value in hf_state.items():
            if key.endswith("_proj.bias") or re.fullmatch(r".*\.fc[12]\.bias", key):
                mapped.setdefault(key, torch.zeros_like(value))
    check_keys(set(hf_state), set(mapped))
    with torch.no_grad():
        hf.load_state_dict(mapped, strict=True)
    first = next(model.parameters())
    return hf.to(device=first.device, dtype=first.dtype).train(model.training)  # type: ignore[call-arg]
