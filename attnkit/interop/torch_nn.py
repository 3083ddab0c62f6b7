"""Copy an attnkit ``EncoderDecoder`` stack into ``torch.nn.Transformer``.

Used by the parity tests: the same weights in both, dropout off, and the
outputs must agree. ``nn.Transformer`` always ends each stack with a
LayerNorm; the paper's post-LN model has none, so for post-LN we build the
reference stacks with ``norm=None``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnkit.interop.keymap import check_keys, save_state
from attnkit.interop.keytable import Dims, Rule, Table
from attnkit.models.encoder_decoder import EncoderDecoder


def _stack_rules(stack: str) -> list[Rule]:
    """An encoder or decoder stack: each layer's self-attention and FFN, the final norm."""
    p = f"{stack}.layers.{{n}}"
    return [
        Rule(f"{p}.self_attn.qkv_proj.{{wb}}", f"{p}.self_attn.in_proj_{{wb}}", "3*D D"),
        Rule(f"{p}.self_attn.out_proj.{{wb}}", f"{p}.self_attn.out_proj.{{wb}}", "D D"),
        Rule(f"{p}.ffn.w1.{{wb}}", f"{p}.linear1.{{wb}}", "F D"),
        Rule(f"{p}.ffn.w2.{{wb}}", f"{p}.linear2.{{wb}}", "D F"),
        Rule(f"{p}.self_attn_residual.norm.{{wb}}", f"{p}.norm1.{{wb}}", "D"),
        Rule(f"{p}.ffn_residual.norm.{{wb}}", f"{p}.norm{2 if stack == 'encoder' else 3}.{{wb}}",
             "D"),
        Rule(f"{stack}.final_norm.{{wb}}", f"{stack}.norm.{{wb}}", "D"),
    ]  # fmt: skip


# The decoder's cross-attention: our q_proj and kv_proj stacked <-> nn.MultiheadAttention's
# in_proj (rows: queries, keys, values).
_CROSS_ATTENTION = [
    Rule(tuple(f"decoder.layers.{{n}}.cross_attn.{p}_proj.{{wb}}" for p in ("q", "kv")),
         "decoder.layers.{n}.multihead_attn.in_proj_{wb}", "3*D D", rows=("D", "2*D")),
    Rule("decoder.layers.{n}.cross_attn.out_proj.{wb}",
         "decoder.layers.{n}.multihead_attn.out_proj.{wb}", "D D"),
    Rule("decoder.layers.{n}.cross_attn_residual.norm.{wb}", "decoder.layers.{n}.norm2.{wb}", "D"),
]  # fmt: skip
TORCH_NN_TRANSFORMER_KEYS = Table(
    "torch.nn.Transformer",
    (*_stack_rules("encoder"), *_stack_rules("decoder"), *_CROSS_ATTENTION),
)


def to_torch_nn_transformer(model: EncoderDecoder) -> nn.Transformer:
    """An ``nn.Transformer`` (batch-first) holding a copy of ``model``'s stacks."""
    c = model.config
    pre = c.norm_position == "pre"
    common: dict[str, Any] = dict(
        d_model=c.d_model,
        nhead=c.num_heads,
        dim_feedforward=c.d_ff,
        dropout=c.dropout,
        activation=c.activation,
        batch_first=True,
        norm_first=pre,
    )
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**common),
        c.num_encoder_layers,
        norm=nn.LayerNorm(c.d_model) if pre else None,
        enable_nested_tensor=False,
    )
    decoder = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(**common),
        c.num_decoder_layers,
        norm=nn.LayerNorm(c.d_model) if pre else None,
    )
    ref = nn.Transformer(
        d_model=c.d_model,
        nhead=c.num_heads,
        custom_encoder=encoder,
        custom_decoder=decoder,
        batch_first=True,
    )
    ours = {k: v for k, v in model.state_dict().items() if k.startswith(("encoder.", "decoder."))}
    dims = Dims({"D": c.d_model, "F": c.d_ff})
    mapped = save_state(TORCH_NN_TRANSFORMER_KEYS, ours, dims)
    check_keys(ref.state_dict(), mapped, "nn.Transformer state dict")
    with torch.no_grad():
        ref.load_state_dict(mapped, strict=True)
    return ref
