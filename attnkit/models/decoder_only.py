"""A decoder-only (GPT-style) causal language model.

One stack of ``CausalLayer``: masked self-attention and the FFN, each in a
``Residual`` (pre-LN by default, as GPT-2; post-LN gives the paper's layer
without cross-attention). Training uses ``forward(ids)``; decoding uses the
stepping protocol of ``attnkit.decoding`` against an explicit ``KVCache``:

* ``start(prompt_ids (B, T))`` prefills the cache with all but the *last*
  prompt token and keeps that token pending;
* the first ``step(tokens, state)`` feeds the pending token, whatever
  ``tokens`` holds (``attnkit.decoding``'s loops feed BOS there, a caller may
  also pass the last prompt token itself), and returns the logits of the first
  new token; later steps feed ``tokens``.

So ``greedy_search``/``sample``/``beam_search`` continue a prompt as they are
(pass ``max_len_a=0, max_len_b=N`` for ``N`` new tokens), and
``attnkit.decoding.generate`` streams tokens one by one. Prompts in one batch
must have the same length (no padding).

Shapes: ``B`` batch, ``T`` length, ``D`` d_model, ``V`` vocabulary, ``h`` heads.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from attnkit.attention.cache import KVCache
from attnkit.attention.multihead import MultiHeadAttention
from attnkit.blocks import FeedForward, Residual
from attnkit.blocks.encoder_layer import EncoderLayer
from attnkit.models.embeddings import InputEmbedding, TokenEmbedding
from attnkit.models.lm_config import DecoderOnlyConfig, EncoderOnlyConfig
from attnkit.positions import RelativePositions, build_positions


@dataclass
class CausalLMOutput:
    """What ``DecoderOnlyLM.forward`` returns.

    Attributes:
        logits: ``(B, T, V)``; position ``t`` scores the token at ``t + 1``.
        hidden: ``(B, T, D)`` final hidden states (after the final norm).
        attentions: per layer ``(B, h, T, T)``, only on request.
    """

    logits: Tensor
    hidden: Tensor
    attentions: list[Tensor] | None = None


class CausalLayer(EncoderLayer):
    """Masked self-attention then the FFN (a decoder layer without cross-attention).

    The same sublayers as an encoder layer; only the attention is causal and cached.
    """

    def forward(  # type: ignore[override]  # a cache instead of a padding mask
        self,
        x: Tensor,
        *,
        need_weights: bool = False,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> tuple[Tensor, Tensor | None]:
        """``x`` ``(B, T, D)`` -> ``(B, T, D)``; weights ``(B, h, T, T')`` on request.

        With a ``cache``, ``x`` holds the newest positions; their keys/values
        are appended at ``layer`` and attention covers all cached positions.
        """
        x, weights = self.self_attn_residual(
            x,
            lambda h: self.self_attn(
                h, is_causal=True, need_weights=need_weights, cache=cache, layer=layer
            ),
        )
        x, _ = self.ffn_residual(x, self.ffn)
        return x, weights


def build_self_attention(c: DecoderOnlyConfig | EncoderOnlyConfig) -> MultiHeadAttention:
    """One layer's self-attention, with its own relative tables when configured."""
    relative = (
        RelativePositions(c.head_dim, c.max_relative_position) if c.relative_positions else None
    )
    return MultiHeadAttention(
        c.d_model, c.num_heads, dropout=c.attention_dropout, relative_positions=relative
    )


def build_causal_layers(c: DecoderOnlyConfig) -> list[CausalLayer]:
    return [
        CausalLayer(
            self_attn=build_self_attention(c),
            ffn=FeedForward(c.d_model, c.d_ff, c.activation),
            self_attn_residual=Residual(c.d_model, c.dropout, c.norm_position),
            ffn_residual=Residual(c.d_model, c.dropout, c.norm_position),
        )
        for _ in range(c.num_layers)
    ]


@dataclass
class DecoderOnlyState:
    """Decoding state: the KV cache and the prompt token still to be fed.

    Attributes:
        cache: every layer's self-attention keys/values.
        pending: ``(B,)`` the last prompt token, fed by the first ``step``.
    """

    cache: KVCache
    pending: Tensor | None = None

    def reorder(self, indices: Tensor) -> DecoderOnlyState:
        """Keep batch rows ``indices`` ``(B',)`` (beams, finished rows)."""
        self.cache.reorder(indices)
        if self.pending is not None:
            self.pending = self.pending.index_select(0, indices)
        return self


class DecoderOnlyLM(nn.Module):
    """A GPT-style language model. Build it from a ``DecoderOnlyConfig``."""

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__()
        c = self.config = config
        self.pad_id, self.bos_id, self.eos_id = c.pad_id, c.bos_id, c.eos_id
        tokens = TokenEmbedding(c.vocab_size, c.d_model)
        self.embed = InputEmbedding(
            tokens, build_positions(c.absolute_positions, c.max_len, c.d_model), c.dropout
        )
        self.layers = nn.ModuleList(build_causal_layers(c))
        # Pre-LN leaves the residual stream un-normalised: end with a LayerNorm.
        self.final_norm = nn.LayerNorm(c.d_model) if c.norm_position == "pre" else None
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_embeddings:
            self.lm_head.weight = tokens.weight  # Press & Wolf (2017), the paper's §3.4
        self._init_weights()

    def _init_weights(self) -> None:
        # Xavier-uniform projections as in EncoderDecoder; embeddings keep N(0, D^-0.5).
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not self.lm_head:
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        if not self.config.tie_embeddings:
            nn.init.normal_(self.lm_head.weight, std=self.config.d_model**-0.5)

    @property
    def context_length(self) -> int:
        """The most positions the model can see at once (``config.max_len``)."""
        return self.config.max_len

    def num_parameters(self) -> int:
        """Trainable parameters, counting tied matrices once."""
        return sum(p.numel() for p in self.parameters())

    def _run_layers(
        self, x: Tensor, *, need_weights: bool = False, cache: KVCache | None = None
    ) -> tuple[Tensor, list[Tensor] | None]:
        weights = []
        for i, layer in enumerate(self.layers):
            x, w = layer(x, need_weights=need_weights, cache=cache, layer=i)
            weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, (weights if need_weights else None)

    def forward(self, ids: Tensor, *, need_weights: bool = False) -> CausalLMOutput:
        """``ids`` ``(B, T)`` with ``T <= max_len`` -> next-token logits ``(B, T, V)``.

        Right padding is harmless: a real position never sees a later one.
        """
        hidden, weights = self._run_layers(self.embed(ids), need_weights=need_weights)
        return CausalLMOutput(logits=self.lm_head(hidden), hidden=hidden, attentions=weights)

    # -- incremental decoding (the stepping protocol) ------------------------------

    def new_state(self, batch_size: int, *, capacity: int | None = None) -> DecoderOnlyState:
        """An empty state (empty cache) for ``batch_size`` rows."""
        c = self.config
        weight = self.embed.tokens.weight
        cache = KVCache(
            c.num_layers,
            batch_size,
            c.num_heads,
            c.head_dim,
            capacity=capacity or c.max_len,
            dtype=weight.dtype,
            device=weight.device,
        )
        return DecoderOnlyState(cache=cache)

    def extend(self, ids: Tensor, state: DecoderOnlyState) -> Tensor:
        """Feed ``ids`` ``(B, t)`` after the cached positions; logits ``(B, V)`` of the last.

        Raises ``ValueError`` (from the positions) past ``max_len`` positions.
        """
        cache = state.cache
        hidden, _ = self._run_layers(self.embed(ids, offset=cache.length), cache=cache)
        cache.advance(ids.size(1))
        return self.lm_head(hidden[:, -1])

    def start(self, prompt_ids: Tensor) -> DecoderOnlyState:
        """Prefill the cache with ``prompt_ids[:, :-1]``; the last token is fed by ``step``.

        ``prompt_ids`` is ``(B, T)`` with ``1 <= T <= max_len``, no padding.
        """
        if prompt_ids.dim() != 2 or prompt_ids.size(1) < 1:
            shape = tuple(prompt_ids.shape)
            raise ValueError(f"prompt_ids: expected (batch, length >= 1) token ids, got {shape}")
        state = self.new_state(prompt_ids.size(0))
        if prompt_ids.size(1) > 1:
            self.extend(prompt_ids[:, :-1], state)
        state.pending = prompt_ids[:, -1]
        return state

    def step(self, tokens: Tensor, state: DecoderOnlyState) -> tuple[Tensor, DecoderOnlyState]:
        """Feed ``tokens`` ``(B,)`` (or the pending prompt token); next-token logits ``(B, V)``."""
        if state.pending is not None:
            tokens, state.pending = state.pending, None
        return self.extend(tokens.reshape(-1, 1), state), state
