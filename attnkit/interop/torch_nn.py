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

from attnkit.interop.keymap import KeyTable, check_keys, rename_keys
from attnkit.models.encoder_decoder import EncoderDecoder

_L = r"(\d+)"
TORCH_NN_TRANSFORMER_KEYS: KeyTable = [
    (rf"encoder\.layers\.{_L}\.self_attn\.qkv_proj\.(weight|bias)",
     r"encoder.layers.\1.self_attn.in_proj_\2"),
    (rf"encoder\.layers\.{_L}\.self_attn\.out_proj\.(weight|bias)",
     r"encoder.layers.\1.self_attn.out_proj.\2"),
    (rf"encoder\.layers\.{_L}\.ffn\.w1\.(weight|bias)", r"encoder.layers.\1.linear1.\2"),
    (rf"encoder\.layers\.{_L}\.ffn\.w2\.(weight|bias)", r"encoder.layers.\1.linear2.\2"),
    (rf"encoder\.layers\.{_L}\.self_attn_residual\.norm\.(weight|bias)",
     r"encoder.layers.\1.norm1.\2"),
    (rf"encoder\.layers\.{_L}\.ffn_residual\.norm\.(weight|bias)", r"encoder.layers.\1.norm2.\2"),
    (r"encoder\.final_norm\.(weight|bias)", r"encoder.norm.\1"),
    (rf"decoder\.layers\.{_L}\.self_attn\.qkv_proj\.(weight|bias)",
     r"decoder.layers.\1.self_attn.in_proj_\2"),
    (rf"decoder\.layers\.{_L}\.self_attn\.out_proj\.(weight|bias)",
     r"decoder.layers.\1.self_attn.out_proj.\2"),
    (rf"decoder\.layers\.{_L}\.cross_attn\.qkv_proj\.(weight|bias)",  # q_proj + kv_proj
     r"decoder.layers.\1.multihead_attn.in_proj_\2"),
    (rf"decoder\.layers\.{_L}\.cross_attn\.out_proj\.(weight|bias)",
     r"decoder.layers.\1.multihead_attn.out_proj.\2"),
    (rf"decoder\.layers\.{_L}\.ffn\.w1\.(weight|bias)", r"decoder.layers.\1.linear1.\2"),
    (rf"decoder\.layers\.{_L}\.ffn\.w2\.(weight|bias)", r"decoder.layers.\1.linear2.\2"),
    (rf"decoder\.layers\.{_L}\.self_attn_residual\.norm\.(weight|bias)",
     r"decoder.layers.\1.norm1.\2"),
    (rf"decoder\.layers\.{_L}\.cross_attn_residual\.norm\.(weight|bias)",
     r"decoder.layers.\1.norm2.\2"),
    (rf"decoder\.layers\.{_L}\.ffn_residual\.norm\.(weight|bias)", r"decoder.layers.\1.norm3.\2"),
    (r"decoder\.final_norm\.(weight|bias)", r"decoder.norm.\1"),
]  # fmt: skip


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
    for key in [k for k in ours if ".cross_attn.q_proj." in k]:  # in_proj: q rows, then k, v
        kv = key.replace(".q_proj.", ".kv_proj.")
        ours[key.replace(".q_proj.", ".qkv_proj.")] = torch.cat([ours.pop(key), ours.pop(kv)])
    mapped = rename_keys(ours, TORCH_NN_TRANSFORMER_KEYS)
    check_keys(set(ref.state_dict()), set(mapped))
    with torch.no_grad():
        ref.load_state_dict(mapped, strict=True)
    return ref
