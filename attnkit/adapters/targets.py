"""Which linear of which family plays which role (``q``/``k``/``v``/``o``/``ffn``).

One table, ``ROLE_MAP``: ``(owner class, attribute) -> roles of its output
rows, in order``. A projection with several roles is fused: its rows are cut
into the roles' blocks (``qkv_proj``: ``D`` query rows, then ``h_kv d`` key
rows and as many value rows; grouped-query attention has fewer key/value rows
than query rows). Cross-attention works both with its fused ``qkv_proj``
sliced by the module and as separate ``q_proj`` (``D -> D``) and ``kv_proj``
(``D -> 2 h_kv d``, keys then values): each spelling has its row here.

Per family:

* Swin: every window attention's ``qkv_proj`` and ``out_proj``, and its FFNs.
* Transformer, decoder-only, encoder-only, ViT: every ``MultiHeadAttention``
  (self- and cross-attention) and every feed-forward network (``FeedForward``,
  ``SwiGLU``, the experts of a mixture of experts; never its router). An
  attention module's own score parameters (``general``/``additive`` scores)
  are not projections of the residual stream and are left alone.
* RNN encoder-decoder: ``q``/``k`` are the additive (Bahdanau) score's query
  and key projections, ``o`` is the output layer before the softmax
  (``pre_output``: ``tanh(W_o [s; c; e])``, Luong's ``W_c``); the recurrent
  cells are not linears and stay frozen; it has no ``v`` or ``ffn``.

Embeddings, the output projection (often tied to them), classifier heads and
ViT's patch projection are never targets.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from torch import nn

from attnkit.attention.multihead import MultiHeadAttention
from attnkit.attention.scores import AdditiveScore, Score
from attnkit.attention.windows import WindowAttention
from attnkit.blocks.feedforward import FeedForward
from attnkit.blocks.swiglu import SwiGLU
from attnkit.models.rnn_seq2seq import RNNSeq2Seq

ATTENTION = {"qkv_proj": ("q", "k", "v"), "q_proj": ("q",), "kv_proj": ("k", "v"),
             "out_proj": ("o",)}  # fmt: skip
ROLE_MAP: dict[tuple[type[nn.Module], str], tuple[str, ...]] = {
    **{(MultiHeadAttention, name): roles for name, roles in ATTENTION.items()},
    (WindowAttention, "qkv_proj"): ("q", "k", "v"),  # Swin: D rows each
    (WindowAttention, "out_proj"): ("o",),
    (FeedForward, "w1"): ("ffn",),
    (FeedForward, "w2"): ("ffn",),
    (SwiGLU, "gate_proj"): ("ffn",),
    (SwiGLU, "up_proj"): ("ffn",),
    (SwiGLU, "down_proj"): ("ffn",),
    (AdditiveScore, "query_proj"): ("q",),
    (AdditiveScore, "key_proj"): ("k",),
    (RNNSeq2Seq, "pre_output"): ("o",),
}


@dataclass(frozen=True)
class Target:
    """One linear to adapt: ``getattr(owner, attribute)`` and its rows per role.

    ``rows``: role -> ``(start, stop)`` of every role the linear carries
    (whether targeted or not); ``name``: its dotted path in the model.
    """

    name: str
    owner: nn.Module
    attribute: str
    rows: dict[str, tuple[int, int]]


def _role_rows(owner: nn.Module, roles: tuple[str, ...], out: int) -> dict[str, tuple[int, int]]:
    """Row ranges of ``roles`` in a projection with ``out`` rows (see the module doc)."""
    if len(roles) == 1:
        return {roles[0]: (0, out)}
    if roles == ("q", "k", "v"):
        d = owner.d_model if isinstance(owner, MultiHeadAttention) else out // 3
        kv = (out - d) // 2
        return {"q": (0, d), "k": (d, d + kv), "v": (d + kv, out)}
    half = out // 2  # ("k", "v"): keys then values
    return {roles[0]: (0, half), roles[1]: (half, out)}


def _skipped(model: nn.Module) -> set[int]:
    """Modules inside an attention module's score: never a projection of the stream."""
    return {
        id(m)
        for owner in model.modules()
        if isinstance(owner, MultiHeadAttention) and isinstance(owner.score, Score)
        for m in owner.score.modules()
    }


def find_targets(model: nn.Module) -> Iterator[Target]:
    """Every linear of ``model`` that has a role, in ``named_modules`` order."""
    skipped = _skipped(model)
    for prefix, owner in model.named_modules():
        if id(owner) in skipped:
            continue
        for attribute, child in owner.named_children():
            roles = next(
                (r for (cls, attr), r in ROLE_MAP.items()
                 if attr == attribute and isinstance(owner, cls)),
                None,
            )  # fmt: skip
            weight = getattr(child, "weight", None)
            if roles is None or weight is None or weight.dim() != 2:
                continue
            name = f"{prefix}.{attribute}" if prefix else attribute
            yield Target(name, owner, attribute, _role_rows(owner, roles, weight.size(0)))


def roles_present(model: nn.Module) -> set[str]:
    """The roles ``model`` has projections for (an RNN has no ``v`` or ``ffn``)."""
    return {role for target in find_targets(model) for role in target.rows}


def selected(target: Target, roles: Iterable[str]) -> dict[str, tuple[int, int]]:
    """The rows of ``target`` whose role is in ``roles``."""
    wanted = set(roles)
    return {role: rows for role, rows in target.rows.items() if role in wanted}
