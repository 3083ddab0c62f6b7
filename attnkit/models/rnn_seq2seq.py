"""RNN encoder-decoders, with and without attention: the models the Transformer replaced.

One encoder (LSTM or GRU, optionally bidirectional, over packed sequences)
and one decoder whose step differs by ``config.attention``:

* ``"none"`` (Cho et al., 2014): the encoder's final top-layer state ``c``
  ``(B, E)`` is a fixed context. The decoder starts from the bridged final
  state (Sutskever et al.'s initialisation), reads ``[e_t; c]`` at every step
  and its output layer sees ``[s_t; c; e_t]``. One design covers both papers'
  essentials: the start state and the context at every step.
* ``"bahdanau"`` (Bahdanau et al., 2015): additive attention from the
  *previous* decoder state ``s_{t-1}`` over the encoder states gives ``c_t``;
  the RNN reads ``[e_t; c_t]``; output layer ``tanh(W_o [s_t; c_t; e_t])``
  (tanh in place of the paper's maxout).
* ``"luong_*"`` (Luong et al., 2015, global attention): the RNN reads
  ``e_t`` (plus ``h~_{t-1}`` with ``input_feeding``); a general / dot /
  location score from the *current* state ``s_t`` gives ``c_t``; the
  attentional vector ``h~_t = tanh(W_c [c_t; s_t])`` feeds the softmax. A
  bidirectional encoder's states are projected to ``hidden_size`` once, so
  dot scores have matching sizes.

Scores come from ``attnkit.attention.scores`` and go through ``attend``, which
masks the source padding. With several layers, attention reads the top
layer's state. The bridge maps each layer's final encoder state (both
directions side by side) to the decoder's size: ``tanh(W h)`` for ``h`` and
``W c`` for an LSTM's cell (bidirectional only; otherwise it is passed on).

The interface is ``EncoderDecoder``'s: ``forward`` for teacher forcing
(attention maps as one "layer" of one "head", ``(B, 1, T, S)``),
``start``/``step`` for the searches.
Source padding must be on the right.

Shapes: ``B`` batch, ``S`` source length, ``T`` target length, ``H``
hidden size, ``E`` encoder width (``2H`` if bidirectional), ``M`` width of
the attended states, ``V`` vocabulary, ``L`` layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnkit.attention.functional import ScoreFn, attend
from attnkit.attention.scores import DotScore, Score, build_score
from attnkit.models.outputs import Seq2SeqOutput
from attnkit.models.rnn_config import RNNSeq2SeqConfig
from attnkit.roles import Roles, projection

_LUONG_SCORES = {"luong_general": "general", "luong_dot": "dot", "luong_location": "location"}


def _rnn(c: RNNSeq2SeqConfig, input_size: int, *, bidirectional: bool = False) -> nn.RNNBase:
    cls = nn.LSTM if c.cell == "lstm" else nn.GRU
    return cls(
        input_size,
        c.hidden_size,
        c.num_layers,
        batch_first=True,
        bidirectional=bidirectional,
        dropout=c.dropout if c.num_layers > 1 else 0.0,  # between layers only
    )


# -- decoding state ----------------------------------------------------------------


@dataclass
class RNNSeq2SeqState:
    """What decoding carries between steps.

    Attributes:
        memory: ``(B, S, M)`` the states attention averages.
        keys: ``(B, S, *)`` ``memory`` after the score's key projection.
        src_mask: ``(B, 1, S)`` True = real source token.
        hidden: the decoder RNN's state, ``(L, B, H)`` each: ``(h,)`` for a
            GRU, ``(h, c)`` for an LSTM.
        context: ``(B, E)`` the fixed context (attention ``"none"``), else None.
        feed: ``(B, H)`` Luong's ``h~_{t-1}`` (input feeding), else None.
    """

    memory: Tensor
    keys: Tensor
    src_mask: Tensor
    hidden: tuple[Tensor, ...]
    context: Tensor | None = None
    feed: Tensor | None = None

    def reorder(self, indices: Tensor, *, group_size: int | None = None) -> RNNSeq2SeqState:
        """Keep batch rows ``indices`` ``(B',)``, e.g. to follow beams.

        ``group_size`` (beam groups) changes nothing here: every part moves.
        """
        self.memory = self.memory.index_select(0, indices)
        self.keys = self.keys.index_select(0, indices)
        self.src_mask = self.src_mask.index_select(0, indices)
        self.hidden = tuple(h.index_select(1, indices) for h in self.hidden)
        if self.context is not None:
            self.context = self.context.index_select(0, indices)
        if self.feed is not None:
            self.feed = self.feed.index_select(0, indices)
        return self


# -- the model ---------------------------------------------------------------------


class RNNSeq2Seq(nn.Module):
    """An RNN encoder-decoder. Build it from an ``RNNSeq2SeqConfig``."""

    def __init__(self, config: RNNSeq2SeqConfig):
        super().__init__()
        c = self.config = config
        self.pad_id, self.bos_id, self.eos_id = c.pad_id, c.bos_id, c.eos_id
        H, E = c.hidden_size, c.encoder_dim
        self.dropout = nn.Dropout(c.dropout)

        self.src_embed = nn.Embedding(c.src_vocab_size, c.embed_dim, padding_idx=c.pad_id)
        self.encoder = _rnn(c, c.embed_dim, bidirectional=c.bidirectional)
        num_states = 2 if c.cell == "lstm" else 1
        self.bridge = (
            nn.ModuleList(nn.Linear(E, H) for _ in range(num_states)) if c.bidirectional else None
        )

        # Luong scores compare s_t with the attended states, so those get width H.
        self.memory_proj = nn.Linear(E, H, bias=False) if c.is_luong and c.bidirectional else None
        M = H if c.is_luong else E
        self.score: Score | None = None
        if c.attention == "bahdanau":
            self.score = build_score("additive", query_dim=H, key_dim=E, attn_dim=H)
        elif c.is_luong:
            self.score = build_score(
                _LUONG_SCORES[c.attention], query_dim=H, key_dim=M, max_src_len=c.max_src_len
            )

        self.tgt_embed = nn.Embedding(c.tgt_vocab_size, c.embed_dim, padding_idx=c.pad_id)
        rnn_in = c.embed_dim
        if not c.is_luong:
            rnn_in += E  # the context, fixed or attended
        elif c.input_feeding:
            rnn_in += H  # h~_{t-1}
        self.decoder = _rnn(c, rnn_in)
        # none/bahdanau: tanh(W_o [s; c; e]); Luong: h~ = tanh(W_c [c; s]).
        pre_in = H + M if c.is_luong else H + E + c.embed_dim
        self.pre_output = nn.Linear(pre_in, H)
        self.output_proj = nn.Linear(H, c.tgt_vocab_size)
        self._init_weights()

    def _init_weights(self) -> None:
        # Every parameter ~ U(-0.1, 0.1), as Luong et al. (§4.1); Sutskever et
        # al. used 0.08. Padding embeddings stay zero.
        for p in self.parameters():
            nn.init.uniform_(p, -0.1, 0.1)
        with torch.no_grad():
            self.src_embed.weight[self.pad_id].zero_()
            self.tgt_embed.weight[self.pad_id].zero_()

    def roles(self) -> Roles:
        """``pre_output`` is the attention's output layer (``o``: ``tanh(W_o [s; c; e])``,
        Luong's ``W_c``); an additive score declares its ``q`` and ``k``; the recurrent
        cells are not linears."""
        return Roles((projection("pre_output", "o"),))

    def num_parameters(self) -> int:
        """Trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # -- encoder -------------------------------------------------------------------

    def encode(self, src_ids: Tensor) -> RNNSeq2SeqState:
        """Run the encoder over ``src_ids`` ``(B, S)`` (right-padded) once."""
        c = self.config
        B, S = src_ids.shape
        real = src_ids != self.pad_id
        # Packing makes each sentence's final state its last real token's, and
        # the backward direction start there. An empty source reads one pad.
        lengths = real.sum(dim=1).clamp(min=1).cpu()
        packed = pack_padded_sequence(
            self.dropout(self.src_embed(src_ids)), lengths, batch_first=True, enforce_sorted=False
        )
        out, final = self.encoder(packed)
        outputs, _ = pad_packed_sequence(out, batch_first=True, total_length=S)  # (B, S, E)
        finals = final if isinstance(final, tuple) else (final,)
        # (L * dirs, B, H) -> (L, B, E): each layer's directions side by side
        # (the forward's last state, the backward's first).
        dirs = 2 if c.bidirectional else 1
        finals = tuple(
            f.view(c.num_layers, dirs, B, c.hidden_size)
            .transpose(1, 2)
            .reshape(c.num_layers, B, -1)
            for f in finals
        )
        if self.bridge is None:
            hidden = finals
        else:
            h = torch.tanh(self.bridge[0](finals[0]))
            hidden = (h, self.bridge[1](finals[1])) if len(finals) == 2 else (h,)

        memory = outputs if self.memory_proj is None else self.memory_proj(outputs)
        keys = memory if self.score is None else self.score.project_keys(memory)
        state = RNNSeq2SeqState(memory, keys, real[:, None, :], tuple(hidden))
        if c.attention == "none":
            state.context = finals[0][-1]  # the top layer's final state, (B, E)
        elif c.input_feeding:
            state.feed = memory.new_zeros(B, c.hidden_size)  # h~_0 = 0
        return state

    # -- decoder -------------------------------------------------------------------

    def _attend(
        self, query: Tensor, state: RNNSeq2SeqState, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Context ``(B, Tq, M)`` (and weights ``(B, Tq, S)``) for queries ``(B, Tq, H)``."""
        assert self.score is not None
        score: ScoreFn = self.score
        if not isinstance(self.score, DotScore):  # keys are already projected; dot stays fused
            score = partial(self.score, projected=True)
        return attend(
            query,
            state.keys,
            state.memory,
            mask=state.src_mask,
            score=score,
            need_weights=need_weights,
        )

    def _run(self, x: Tensor, state: RNNSeq2SeqState) -> Tensor:
        """Advance the decoder RNN over ``x`` ``(B, t, in)``; top-layer outputs ``(B, t, H)``."""
        hidden = state.hidden if len(state.hidden) == 2 else state.hidden[0]
        out: Tensor
        out, new = self.decoder(x, hidden)
        state.hidden = new if isinstance(new, tuple) else (new,)
        return out

    def _step(
        self, emb: Tensor, state: RNNSeq2SeqState, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """One target step: ``emb`` ``(B, 1, e)`` -> features ``(B, 1, H)``, weights."""
        c = self.config
        weights = None
        if c.attention == "none":
            assert state.context is not None
            ctx = state.context[:, None]
            s = self._run(torch.cat([emb, ctx], dim=-1), state)
            return torch.tanh(self.pre_output(torch.cat([s, ctx, emb], dim=-1))), None
        if c.attention == "bahdanau":
            prev = state.hidden[0][-1][:, None]  # s_{t-1}, top layer, (B, 1, H)
            ctx, weights = self._attend(prev, state, need_weights)
            s = self._run(torch.cat([emb, ctx], dim=-1), state)
            return torch.tanh(self.pre_output(torch.cat([s, ctx, emb], dim=-1))), weights
        x = emb if state.feed is None else torch.cat([emb, state.feed[:, None]], dim=-1)
        s = self._run(x, state)
        ctx, weights = self._attend(s, state, need_weights)
        feat = torch.tanh(self.pre_output(torch.cat([ctx, s], dim=-1)))
        if state.feed is not None:
            state.feed = feat[:, 0]
        return feat, weights

    def _decode(
        self, tgt_ids: Tensor, state: RNNSeq2SeqState, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Features ``(B, T, H)`` and weights ``(B, T, S)`` for target tokens ``(B, T)``."""
        c = self.config
        emb = self.dropout(self.tgt_embed(tgt_ids))
        if c.attention == "none":
            # The context does not depend on time: one RNN call over all steps.
            assert state.context is not None
            ctx = state.context[:, None].expand(-1, emb.size(1), -1)
            s = self._run(torch.cat([emb, ctx], dim=-1), state)
            return torch.tanh(self.pre_output(torch.cat([s, ctx, emb], dim=-1))), None
        if c.is_luong and not c.input_feeding:
            # Attention reads s_t but never feeds the RNN: run it, then attend at once.
            s = self._run(emb, state)
            ctx, weights = self._attend(s, state, need_weights)
            return torch.tanh(self.pre_output(torch.cat([ctx, s], dim=-1))), weights
        # Bahdanau and input feeding need step t's attention before step t + 1.
        steps = [self._step(emb[:, t : t + 1], state, need_weights) for t in range(emb.size(1))]
        feats = torch.cat([f for f, _ in steps], dim=1)
        maps = [w for _, w in steps if w is not None]
        return feats, (torch.cat(maps, dim=1) if need_weights else None)

    # -- training / scoring --------------------------------------------------------

    def forward(
        self,
        src_ids: Tensor,
        tgt_ids: Tensor,
        *,
        need_weights: bool = False,
        compute_logits: bool = True,
    ) -> Seq2SeqOutput:
        """Teacher-forced pass. ``src_ids`` ``(B, S)``, ``tgt_ids`` ``(B, T)`` (BOS-first).

        Padding (``pad_id``) must be on the right in both. ``cross_attentions``
        (on request, with attention) is one ``(B, 1, T, S)`` map.
        """
        state = self.encode(src_ids)
        feats, weights = self._decode(tgt_ids, state, need_weights)
        return Seq2SeqOutput(
            logits=self.output_proj(self.dropout(feats)) if compute_logits else None,
            hidden=feats,
            cross_attentions=[weights[:, None]] if weights is not None else None,
        )

    # -- incremental decoding (the stepping protocol) ------------------------------

    def start(self, src_ids: Tensor, *, max_steps: int | None = None) -> RNNSeq2SeqState:
        """Encode ``src_ids`` ``(B, S)``; an RNN's state has no length to size (``max_steps``)."""
        return self.encode(src_ids)

    def step(self, tokens: Tensor, state: RNNSeq2SeqState) -> tuple[Tensor, RNNSeq2SeqState]:
        """Feed the newest target token(s) ``(B,)`` or ``(B, t)``; get logits ``(B, V)``."""
        if tokens.dim() == 1:
            tokens = tokens[:, None]
        feats, _ = self._decode(tokens, state, need_weights=False)
        return self.output_proj(self.dropout(feats[:, -1])), state
