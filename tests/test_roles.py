"""Declared roles (``attnkit.roles``): row ranges, first declaration wins, parameter kinds."""

from __future__ import annotations

import pytest
from torch import nn

from attnkit.attention.multihead import MultiHeadAttention
from attnkit.blocks.norms import RMSNorm
from attnkit.positions.t5_relative import T5RelativeBias
from attnkit.roles import Projection, declared_projections, parameter_kinds, projection


def test_fused_rows_follow_the_declared_sizes():
    fused = Projection("qkv_proj", ("q", "k", "v"), (32, 16, 16))
    assert fused.rows(64) == {"q": (0, 32), "k": (32, 48), "v": (48, 64)}
    assert projection("w1", "ffn_in").rows(7) == {"ffn_in": (0, 7)}
    with pytest.raises(ValueError, match="cover 64 of 60 rows"):
        fused.rows(60)
    with pytest.raises(ValueError, match="needs the size of each role"):
        Projection("qkv_proj", ("q", "k"))


def test_a_smaller_key_dim_is_sliced_by_the_module_not_guessed():
    """Queries and keys of size d_k < D / h: the q rows are h d_k, not D (a row split
    guessed from d_model would put key rows under q)."""
    attn = MultiHeadAttention(32, 4, num_kv_heads=2, key_dim=4)
    (qkv,) = [p for p in declared_projections(attn) if p.attribute == "qkv_proj"]
    assert qkv.rows == {"q": (0, 16), "k": (16, 24), "v": (24, 40)}


def test_the_owner_speaks_for_its_score_first():
    attn = MultiHeadAttention(32, 4, score="additive")
    roles = {p.name: p.rows for p in declared_projections(attn)}
    assert roles["score.query_proj"] == {"score": (0, roles["score.query_proj"]["score"][1])}
    assert "q" not in roles["score.query_proj"]  # the score's own declaration is shadowed


def test_parameter_kinds():
    model = nn.Module()
    model.norm, model.ln = RMSNorm(8), nn.LayerNorm(8)
    model.bias = T5RelativeBias(4, bidirectional=True)
    model.embed = nn.Embedding(10, 8)
    assert parameter_kinds(model) == {
        "norm.weight": "norm", "ln.weight": "norm", "ln.bias": "norm",
        "bias.table.weight": "relative_position", "embed.weight": "embedding",
    }  # fmt: skip
