"""A decoder-only (GPT-style) causal language model.

One stack of ``CausalLayer``: masked self-attention and the FFN, each in a
``Residual`` (pre-LN by default, as GPT-2; post-LN gives the paper's layer
without cross-attention). Training uses ``forward(ids)``; decoding uses the
stepping protocol of ``attnkit.decoding`` against an explicit cache:

* ``start(prompt_ids (B, T))`` prefills the cache with all but the *last*
  prompt token and keeps that token pending;
* the first ``step(tokens, state)`` feeds the pending token, whatever
  ``tokens`` holds (``attnkit.decoding``'s loops feed BOS there, a caller may
  also pass the last prompt token itself), and returns the logits of the first
  new token; later steps feed ``tokens``.

So ``greedy_search``/``sample``/``beam_search`` continue a prompt as they are
(pass ``max_len_a=0, max_len_b=N`` for ``N`` new tokens), and
``attnkit.decoding.generate`` streams tokens one by one. Prompts in one batch
must have the same length (no padding). ``start`` takes a ``cache`` factory,
so the static-cache wrapper (``attnkit.decoding.static``) serves this model
as it serves the encoder-decoder.

Shapes: ``B`` batch, ``T`` length, ``D`` d_model, ``V`` vocabulary, ``h`` heads.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from attnkit.attention.cache import DecoderCache
from attnkit.attention.masks import Mask
from attnkit.blocks import run_causal_layers
from attnkit.blocks.moe import MoEAux, merge_aux
from attnkit.models import builders
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.models.state import CacheFactory, CacheLayout, DecoderState, default_cache


@dataclass
class CausalLMOutput:
    """What ``DecoderOnlyLM.forward`` returns.

    Attributes:
        logits: ``(B, T, V)``; position ``t`` scores the token at ``t + 1``.
        hidden: ``(B, T, D)`` final hidden states (after the final norm).
        attentions: per layer ``(B, h, T, T)``, only on request.
        moe: the mixture-of-experts layers' report, or ``None``.
    """

    logits: Tensor
    hidden: Tensor
    attentions: list[Tensor] | None = None
    moe: MoEAux | None = None


class DecoderOnlyLM(nn.Module):
    """A GPT-style language model. Build it from a ``DecoderOnlyConfig``."""

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__()
        c = self.config = config
        self.pad_id, self.bos_id, self.eos_id = c.pad_id, c.bos_id, c.eos_id
        tokens = builders.token_embedding(c, c.vocab_size)
        self.embed = builders.input_embedding(c, tokens)
        self.layers = nn.ModuleList(builders.causal_layers(c, c.num_layers))
        self.final_norm = builders.final_norm(c)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_embeddings:
            self.lm_head.weight = tokens.weight  # Press & Wolf (2017), the paper's §3.4
        builders.init_weights(self, self.lm_head, tied=c.tie_embeddings, d_model=c.d_model)

    @property
    def context_length(self) -> int:
        """The most positions the model can see at once (``config.max_len``)."""
        return self.config.max_len

    def num_parameters(self) -> int:
        """Trainable parameters, counting tied matrices once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def forward(self, ids: Tensor, *, need_weights: bool = False) -> CausalLMOutput:
        """``ids`` ``(B, T)`` with ``T <= max_len`` -> next-token logits ``(B, T, V)``.

        Right padding is harmless: a real position never sees a later one.
        """
        out = run_causal_layers(
            self.layers, self.embed(ids), final_norm=self.final_norm, need_weights=need_weights
        )
        return CausalLMOutput(
            logits=self.lm_head(out.hidden),
            hidden=out.hidden,
            attentions=out.attentions,
            moe=merge_aux(out.aux),
        )

    # -- incremental decoding (the stepping protocol) ------------------------------

    def cache_layout(self) -> CacheLayout | None:
        """The cache's shape; ``None`` when only the growing cache fits (relative positions)."""
        c = self.config
        if c.relative_positions or c.attention == "linear":
            return None
        return CacheLayout(c.num_layers, c.kv_heads, c.head_dim, c.max_len)

    def decode(
        self, tokens: Tensor, cache: DecoderCache, memory_mask: Mask | None = None
    ) -> Tensor:
        """Logits ``(B, V)`` of the token after ``tokens`` ``(B, t)``, fed at the cache's
        next positions (their keys/values go into ``cache``; the caller advances it).

        Raises ``ValueError`` (from the positions) past ``max_len`` positions.
        """
        x = self.embed(tokens, offset=cache.position_offset())
        out = run_causal_layers(self.layers, x, final_norm=self.final_norm, cache=cache)
        logits: Tensor = self.lm_head(out.hidden[:, -1])
        return logits

    def start(
        self,
        prompt_ids: Tensor,
        *,
        max_steps: int | None = None,
        cache: CacheFactory | None = None,
    ) -> DecoderState:
        """Prefill the cache with ``prompt_ids[:, :-1]``; the last token is fed by ``step``.

        ``prompt_ids`` is ``(B, T)`` with ``1 <= T <= max_len``, no padding;
        ``max_steps`` bounds the ``step`` calls to come (it sizes the cache).
        """
        if prompt_ids.dim() != 2 or prompt_ids.size(1) < 1:
            shape = tuple(prompt_ids.shape)
            raise ValueError(f"prompt_ids: expected (batch, length >= 1) token ids, got {shape}")
        c = self.config
        # The activations' dtype: a float parameter's (the embedding may be quantized).
        weight = next(p for p in self.parameters() if p.is_floating_point())
        prefix = prompt_ids.size(1) - 1
        positions = c.max_len if max_steps is None else min(c.max_len, prefix + max_steps)
        make = default_cache(c) if cache is None else cache
        state = DecoderState(
            cache=make(
                CacheLayout(c.num_layers, c.kv_heads, c.head_dim, c.max_len),
                batch_size=prompt_ids.size(0),
                positions=positions,
                dtype=weight.dtype,
                device=weight.device,
            )
        )
        if prefix:
            self.decode(prompt_ids[:, :-1], state.cache)
            state.cache.advance(prefix)
        state.pending = prompt_ids[:, -1]
        return state

    def verify(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Feed ``tokens`` ``(B, t)`` at once (a token and its draft); the logits after each
        ``(B, t, V)``. The cache advances by ``t``: ``state.truncate`` rolls it back."""
        if state.pending is not None:
            raise ValueError("verify: feed the prompt's last token with step first")
        x = self.embed(tokens, offset=state.cache.position_offset())
        out = run_causal_layers(self.layers, x, final_norm=self.final_norm, cache=state.cache)
        logits: Tensor = self.lm_head(out.hidden)
        state.cache.advance(tokens.size(1))
        return logits, state

    def step(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Feed ``tokens`` ``(B,)`` (or the pending prompt token); next-token logits ``(B, V)``."""
        tokens = state.take_input(tokens)
        logits = self.decode(tokens, state.cache)
        state.cache.advance(tokens.size(1))
        return logits, state
