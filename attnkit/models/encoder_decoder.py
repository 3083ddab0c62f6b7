"""The encoder-decoder Transformer of "Attention Is All You Need" (§3, Figure 1).

Training uses ``forward(src_ids, tgt_ids)``. Decoding uses the stepping
protocol of ``attnkit.decoding``: ``start(src_ids)`` encodes once and
precomputes every layer's cross-attention keys/values into a cache, then
``step(tokens, state)`` feeds one token at a time. ``decode(tokens, cache,
memory_mask)`` is the step's computation against any ``DecoderCache``: the
growing ``KVCache`` here (the reference path), or the ``StaticKVCache`` that
``attnkit.decoding.static.StaticCacheStepper`` passes in through ``start``'s
``cache`` factory (the fast path, optionally compiled).

Shapes: ``B`` batch, ``S`` source length, ``T`` target length, ``D`` d_model,
``V`` vocabulary, ``h`` heads, ``L`` decoder layers, ``d`` head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.attention.cache import DecoderCache
from attnkit.attention.masks import Mask, causal_padding_mask, padding_mask, prepare_mask
from attnkit.blocks import StackOutput
from attnkit.blocks.moe import merge_aux
from attnkit.models import builders
from attnkit.models.config import TransformerConfig
from attnkit.models.outputs import Seq2SeqOutput
from attnkit.models.state import (
    INITIAL_CAPACITY,
    CacheFactory,
    CacheLayout,
    DecoderState,
    default_cache,
)


class EncoderDecoder(nn.Module):
    """The Transformer. Build it from a ``TransformerConfig``."""

    # Right-padding a source with ``pad_id`` changes no real position's output: the
    # encoder and cross-attention mask padding (``attnkit.decoding.static.PadsSource``).
    pads_source = True

    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = self.config = config
        self.pad_id, self.bos_id, self.eos_id = c.pad_id, c.bos_id, c.eos_id

        src_tokens = builders.token_embedding(c, c.src_vocab_size)
        tgt_tokens = (
            src_tokens
            if c.share_embeddings in ("all", "inputs")
            else builders.token_embedding(c, c.tgt_vocab_size)
        )
        self.src_embed = builders.input_embedding(c, src_tokens)
        self.tgt_embed = builders.input_embedding(c, tgt_tokens)
        self.encoder = builders.encoder(c, c.num_encoder_layers)
        self.decoder = builders.decoder(c, c.num_decoder_layers)
        self.output_proj = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        tied = c.share_embeddings in ("decoder", "all")
        if tied:
            # §3.4: the pre-softmax projection shares the target embedding matrix.
            self.output_proj.weight = tgt_tokens.weight
        # T5's unscaled dot product folds 1/sqrt(d_k) into the queries' init instead.
        query_scale = c.head_dim**-0.5 if c.attention_score == "dot" else 1.0
        builders.init_weights(
            self, self.output_proj, tied=tied, d_model=c.d_model, query_scale=query_scale
        )
        # T5 rescales what meets its tied (unscaled) embedding matrix; part of ``hidden``,
        # so ``logits == hidden @ logits_weight().T`` still holds.
        self.output_scale = c.d_model**-0.5 if c.scale_output else 1.0
        if c.scale_output and not c.scale_embeddings:
            # T5 draws that matrix from N(0, 1) (its `shared` init), so that after the
            # d_model**-0.5 rescale the first logits have unit scale. N(0, D**-0.5), right
            # for scaled embeddings, left them D**0.5 (16x at d_model 256) too small, and a
            # 30-minute run spent itself growing the output layer (docs/lab/results-history.md, T5).
            for tokens in {id(t): t for t in (src_tokens, tgt_tokens)}.values():
                nn.init.normal_(tokens.weight, std=1.0)

    def logits_weight(self) -> Tensor:
        """``W`` ``(V, D)`` with ``logits == hidden @ W.T`` exactly (``LinearLogits``), so a
        loss may project ``forward(..., compute_logits=False).hidden`` chunk by chunk."""
        return self.output_proj.weight

    def num_parameters(self) -> int:
        """Trainable parameters, counting tied matrices once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

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

        Padding (``pad_id``) is found in both; target padding must be on the
        right. With ``compute_logits=False`` only ``hidden`` is returned, for a
        loss that projects chunk by chunk.
        """
        encoded, src_mask = self._encode(src_ids, need_weights=need_weights)
        if need_weights:
            # Explicit mask so the returned maps never show attention to padding.
            self_mask, is_causal = causal_padding_mask(tgt_ids, self.pad_id), False
            if self.bos_id == self.pad_id:  # T5: the start token is <pad>, and real
                self_mask[..., 0] = True
        else:
            # With right padding, a real query only ever sees earlier real keys,
            # so the causal mask alone is exact at every real position, and it
            # lets SDPA pick its fastest (flash) kernel.
            self_mask, is_causal = None, True
        decoded = self.decoder(
            self.tgt_embed(tgt_ids),
            encoded.hidden,
            self_mask=self_mask,
            is_causal=is_causal,
            memory_mask=src_mask,
            need_weights=need_weights,
        )
        hidden = self._scaled(decoded.hidden)
        return Seq2SeqOutput(
            logits=self.output_proj(hidden) if compute_logits else None,
            hidden=hidden,
            encoder_attentions=encoded.attentions,
            decoder_self_attentions=decoded.attentions,
            cross_attentions=decoded.cross_attentions,
            moe=merge_aux(encoded.aux + decoded.aux),
        )

    def _scaled(self, hidden: Tensor) -> Tensor:
        return hidden * self.output_scale if self.output_scale != 1.0 else hidden

    def _encode(self, src_ids: Tensor, *, need_weights: bool = False) -> tuple[StackOutput, Tensor]:
        src_mask = padding_mask(src_ids, self.pad_id)
        encoded = self.encoder(self.src_embed(src_ids), mask=src_mask, need_weights=need_weights)
        return encoded, src_mask

    def encode(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        """The encoder output ``(B, S, D)`` and the source mask ``(B, 1, 1, S)``."""
        encoded, src_mask = self._encode(src_ids)
        return encoded.hidden, src_mask

    def cross_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Every decoder layer's cross-attention keys and values, ``(L, B, h, S, d)`` each."""
        kv = [layer.cross_attn.project_kv(memory) for layer in self.decoder.decoder_layers()]
        return torch.stack([k for k, _ in kv]), torch.stack([v for _, v in kv])

    # -- incremental decoding (the stepping protocol) ------------------------------

    def cache_layout(self) -> CacheLayout | None:
        """The decoder cache's shape; ``None`` when only the growing cache fits
        (relative positions assume the queries are the newest keys)."""
        c = self.config
        if c.relative_positions or c.attention == "linear":
            return None
        return self._layout()

    def _layout(self) -> CacheLayout:
        c = self.config
        return CacheLayout(c.num_decoder_layers, c.kv_heads, c.head_dim, c.max_len)

    def start(
        self,
        src_ids: Tensor,
        *,
        max_steps: int | None = None,
        cache: CacheFactory | None = None,
    ) -> DecoderState:
        """Encode ``src_ids`` ``(B, S)`` and precompute the cross-attention K/V.

        ``max_steps`` bounds the ``step`` calls to come (the search's length
        limit) and sizes the cache, which ``cache`` makes (default: the growing
        ``KVCache``, or linear attention's state cache).
        """
        c = self.config
        memory, src_mask = self.encode(src_ids)
        cross = self.cross_kv(memory)
        layout = self._layout()
        positions = min(max_steps or INITIAL_CAPACITY, c.max_len)
        make = default_cache(c) if cache is None else cache
        made = make(
            layout,
            batch_size=src_ids.size(0),
            positions=positions,
            dtype=memory.dtype,
            device=memory.device,
            cross=cross,
        )
        # Without padding the mask changes nothing: leave it out of every step
        # (one host sync per batch; SDPA then takes its unmasked kernel). With
        # padding, its additive form is made here, once for every step.
        if bool(src_mask.all()):
            return DecoderState(cache=made)
        return DecoderState(cache=made, memory_mask=prepare_mask(src_mask, memory.dtype))

    def decode(self, tokens: Tensor, cache: DecoderCache, memory_mask: Mask | None) -> Tensor:
        """Logits ``(B, V)`` after feeding ``tokens`` ``(B, t)`` at the cache's next positions.

        Writes the tokens' keys/values into ``cache``; the caller advances it.
        """
        return self._decode_hidden(tokens, cache, memory_mask, last=True)

    def verify(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Feed ``tokens`` ``(B, t)`` at once (a token and its draft); the logits after each
        ``(B, t, V)``. The cache advances by ``t``: ``state.truncate`` rolls it back."""
        logits = self._decode_hidden(tokens, state.cache, state.memory_mask, last=False)
        state.cache.advance(tokens.size(1))
        return logits, state

    def _decode_hidden(
        self, tokens: Tensor, cache: DecoderCache, memory_mask: Mask | None, *, last: bool
    ) -> Tensor:
        """The logits after the last fed token ``(B, V)`` (``last``) or after each ``(B, t, V)``."""
        t = tokens.size(1)
        x = self.tgt_embed(tokens, offset=cache.position_offset())
        self_mask = cache.self_mask(t)
        decoded = self.decoder(
            x,
            None,
            self_mask=self_mask,
            is_causal=self_mask is None,
            memory_mask=memory_mask,
            cache=cache,
        )
        hidden = decoded.hidden[:, -1] if last else decoded.hidden
        logits: Tensor = self.output_proj(self._scaled(hidden))
        return logits

    def step(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Feed the newest target token(s) ``(B,)`` or ``(B, t)``; logits ``(B, V)`` of the next."""
        tokens = state.take_input(tokens)
        logits = self.decode(tokens, state.cache, state.memory_mask)
        state.cache.advance(tokens.size(1))
        return logits, state
