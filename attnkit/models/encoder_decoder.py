"""The encoder-decoder Transformer of "Attention Is All You Need" (§3, Figure 1).

Training uses ``forward(src_ids, tgt_ids)``; decoding uses the stepping
protocol of ``attnkit.decoding``: ``encode``/``start`` once per source batch,
then ``decode_step``/``step`` one token at a time against an explicit KV cache.

Fast decoding (``fast_decoding``, on by default): when a search tells
``start`` its length bound (``max_steps``), the cache is a
``StaticKVCache`` of exactly that capacity, so every step has the same shapes
(greedy and beam outputs are the same as with the growing cache; tested).
``compile_decoding()`` additionally compiles that step (CUDA graphs on GPU).
Set ``model.fast_decoding = False`` to debug with the plain growing cache.
Relative positions keep the growing cache (their distances assume the
queries are the last keys).

Shapes: ``B`` batch, ``S`` source length, ``T`` target length, ``D`` d_model,
``V`` vocabulary, ``h`` heads.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.attention.cache import KVCache, StaticBufferPool, StaticKVCache
from attnkit.attention.masks import causal_padding_mask, padding_mask
from attnkit.attention.multihead import MultiHeadAttention
from attnkit.blocks import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, Residual
from attnkit.models.config import TransformerConfig
from attnkit.models.embeddings import InputEmbedding, TokenEmbedding
from attnkit.models.outputs import Seq2SeqOutput
from attnkit.positions import RelativePositions, build_positions

# -- builders: config -> modules ---------------------------------------------------


def _residual(c: TransformerConfig) -> Residual:
    return Residual(c.d_model, c.dropout, c.norm_position)


def _attention(c: TransformerConfig, *, self_attention: bool = False) -> MultiHeadAttention:
    # Relative positions (Shaw et al.) live in self-attention only, one pair of
    # tables per layer; cross-attention never has them, as in the paper.
    relative = (
        RelativePositions(c.head_dim, c.max_relative_position)
        if self_attention and c.relative_positions
        else None
    )
    return MultiHeadAttention(
        c.d_model,
        c.num_heads,
        dropout=c.attention_dropout,
        relative_positions=relative,
        score=c.attention_score,
    )


def _final_norm(c: TransformerConfig) -> nn.LayerNorm | None:
    return nn.LayerNorm(c.d_model) if c.norm_position == "pre" else None


def build_encoder(c: TransformerConfig) -> Encoder:
    layers = [
        EncoderLayer(
            self_attn=_attention(c, self_attention=True),
            ffn=FeedForward(c.d_model, c.d_ff, c.activation),
            self_attn_residual=_residual(c),
            ffn_residual=_residual(c),
        )
        for _ in range(c.num_encoder_layers)
    ]
    return Encoder(layers, _final_norm(c))


def build_decoder(c: TransformerConfig) -> Decoder:
    layers = [
        DecoderLayer(
            self_attn=_attention(c, self_attention=True),
            cross_attn=_attention(c),
            ffn=FeedForward(c.d_model, c.d_ff, c.activation),
            self_attn_residual=_residual(c),
            cross_attn_residual=_residual(c),
            ffn_residual=_residual(c),
        )
        for _ in range(c.num_decoder_layers)
    ]
    return Decoder(layers, _final_norm(c))


# -- decoding state ----------------------------------------------------------------


@dataclass
class EncoderDecoderState:
    """What decoding carries between steps.

    Attributes:
        src_mask: ``(B, 1, 1, S)`` which source positions are real.
        cache: decoder keys/values (cross-attention ones computed once).
    """

    src_mask: Tensor
    cache: KVCache | StaticKVCache

    def reorder(self, indices: Tensor) -> EncoderDecoderState:
        """Keep batch rows ``indices`` ``(B',)``, e.g. to follow beams."""
        self.cache.reorder(indices)
        self.src_mask = self.src_mask.index_select(0, indices)
        return self

    def reorder_beams(self, indices: Tensor, beam_size: int) -> EncoderDecoderState:
        """``reorder`` for indices that stay within groups of ``beam_size`` rows.

        The rows of a group (one sentence's beams) share their source, so the
        source mask and cross-attention K/V need not move: the static cache
        reorders its self-attention K/V only (the growing cache, the
        reference path, reorders everything).
        """
        if not isinstance(self.cache, StaticKVCache):
            return self.reorder(indices)
        self.cache.reorder(indices, cross=False)
        return self


# -- the model ---------------------------------------------------------------------


# Compiled decode steps, per model, kept off the module (no state_dict/deepcopy impact).
_COMPILED_STEPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class EncoderDecoder(nn.Module):
    """The Transformer. Build it from a ``TransformerConfig``."""

    # Decoding speed switches (instance attributes override these defaults).
    fast_decoding: bool = True  # static KV cache when the search gives max_steps
    accepts_max_steps = True  # the searches may call start(src_ids, max_steps=...)

    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = self.config = config
        self.pad_id, self.bos_id, self.eos_id = c.pad_id, c.bos_id, c.eos_id

        src_tokens = TokenEmbedding(c.src_vocab_size, c.d_model)
        tgt_tokens = (
            src_tokens
            if c.share_embeddings == "all"
            else TokenEmbedding(c.tgt_vocab_size, c.d_model)
        )
        self.src_embed = InputEmbedding(
            src_tokens, build_positions(c.absolute_positions, c.max_len, c.d_model), c.dropout
        )
        self.tgt_embed = InputEmbedding(
            tgt_tokens, build_positions(c.absolute_positions, c.max_len, c.d_model), c.dropout
        )
        self.encoder = build_encoder(c)
        self.decoder = build_decoder(c)
        self.output_proj = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        if c.share_embeddings in ("decoder", "all"):
            # §3.4: the pre-softmax projection shares the target embedding matrix.
            self.output_proj.weight = tgt_tokens.weight
        self._init_weights()

    def _init_weights(self) -> None:
        # Xavier-uniform for every projection matrix, as in tensor2tensor and
        # fairseq; embeddings keep their own N(0, D^-0.5) init.
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not self.output_proj:
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        if self.config.share_embeddings == "none":
            nn.init.normal_(self.output_proj.weight, std=self.config.d_model**-0.5)

    def num_parameters(self) -> int:
        """Trainable parameters, counting tied matrices once."""
        return sum(p.numel() for p in self.parameters())

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
        src_mask = padding_mask(src_ids, self.pad_id)
        memory, enc_w = self.encoder(
            self.src_embed(src_ids), mask=src_mask, need_weights=need_weights
        )
        if need_weights:
            # Explicit mask so the returned maps never show attention to padding.
            self_mask, is_causal = causal_padding_mask(tgt_ids, self.pad_id), False
        else:
            # With right padding, a real query only ever sees earlier real keys,
            # so the causal mask alone is exact at every real position, and it
            # lets SDPA pick its fastest (flash) kernel.
            self_mask, is_causal = None, True
        hidden, self_w, cross_w = self.decoder(
            self.tgt_embed(tgt_ids),
            memory,
            self_mask=self_mask,
            is_causal=is_causal,
            memory_mask=src_mask,
            need_weights=need_weights,
        )
        return Seq2SeqOutput(
            logits=self.output_proj(hidden) if compute_logits else None,
            hidden=hidden,
            encoder_attentions=enc_w,
            decoder_self_attentions=self_w,
            cross_attentions=cross_w,
        )

    # -- incremental decoding (the stepping protocol) ------------------------------

    def encode(
        self, src_ids: Tensor, *, capacity: int | None = None, static: bool = False
    ) -> EncoderDecoderState:
        """Run the encoder once and precompute every layer's cross-attention K/V.

        ``static=True`` gives a ``StaticKVCache`` of ``capacity`` positions
        (default ``max_len``), pooled across calls when the step is compiled.
        """
        c = self.config
        src_mask = padding_mask(src_ids, self.pad_id)
        memory, _ = self.encoder(self.src_embed(src_ids), mask=src_mask)
        kv = [layer.cross_attn.project_kv(memory) for layer in self.decoder.layers]
        cross_k = torch.stack([k for k, _ in kv])
        cross_v = torch.stack([v for _, v in kv])
        if static:
            compiled = _COMPILED_STEPS.get(self)
            cache: KVCache | StaticKVCache = StaticKVCache.allocate(
                c.num_decoder_layers,
                c.num_heads,
                c.head_dim,
                capacity=capacity or c.max_len,
                cross_k=cross_k,
                cross_v=cross_v,
                pool=None if compiled is None else compiled["pool"],
            )
            return EncoderDecoderState(src_mask=src_mask, cache=cache)
        cache = KVCache(
            c.num_decoder_layers,
            src_ids.size(0),
            c.num_heads,
            c.head_dim,
            capacity=capacity or min(c.max_len, src_ids.size(1) + 52),
            dtype=cross_k.dtype,
            device=src_ids.device,
        )
        cache.set_cross(cross_k, cross_v)
        return EncoderDecoderState(src_mask=src_mask, cache=cache)

    def decode_step(
        self, tokens: Tensor, state: EncoderDecoderState
    ) -> tuple[Tensor, EncoderDecoderState]:
        """Feed the newest target token(s) ``(B,)`` or ``(B, t)``; get logits ``(B, V)``.

        The logits are for the token after the last one fed. The state's
        cache grows by the number of tokens fed.
        """
        if tokens.dim() == 1:
            tokens = tokens[:, None]
        cache = state.cache
        if isinstance(cache, StaticKVCache):
            return self._static_decode_step(tokens, state, cache), state
        x = self.tgt_embed(tokens, offset=cache.length)
        hidden, _, _ = self.decoder(
            x, None, is_causal=True, memory_mask=state.src_mask, cache=cache
        )
        cache.advance(tokens.size(1))
        return self.output_proj(hidden[:, -1]), state

    # -- the fast path: static cache, optionally compiled --------------------------

    def static_decoding_supported(self, max_steps: int) -> bool:
        """Whether ``start(..., max_steps=max_steps)`` takes the static cache."""
        c = self.config
        return self.fast_decoding and not c.relative_positions and 1 <= max_steps <= c.max_len

    def compile_decoding(
        self, enabled: bool = True, *, mode: str | None = "auto", fullgraph: bool = True
    ) -> None:
        """Compile the static-cache decode step with ``torch.compile`` (or stop doing so).

        ``mode="auto"``: ``"reduce-overhead"`` (CUDA graphs) on CUDA, inductor's
        default elsewhere. Shapes are static (``dynamic=False``): each new
        (batch, source length, capacity) compiles once, and past
        ``torch._dynamo.config.recompile_limit`` shapes torch falls back to
        eager. A step that fails to compile warns and runs eagerly from then
        on. Only used while ``fast_decoding`` is on.
        """
        if not enabled:
            _COMPILED_STEPS.pop(self, None)
            return
        entry = _COMPILED_STEPS.get(self)
        if entry is not None and (entry["mode"], entry["fullgraph"]) == (mode, fullgraph):
            return  # already on: keep the compiled step and its buffers
        _COMPILED_STEPS[self] = {
            "mode": mode,
            "fullgraph": fullgraph,
            "fn": None,  # compiled lazily, on the first step's device
            "failed": False,
            "pool": StaticBufferPool(),
        }

    def _compiled_step(self, device: torch.device) -> Callable[..., Tensor] | None:
        """The compiled ``_static_logits`` (called with the model first), or ``None``."""
        entry = _COMPILED_STEPS.get(self)
        if entry is None or entry["failed"]:
            return None
        if entry["fn"] is None:
            mode = entry["mode"]
            if mode == "auto":
                mode = "reduce-overhead" if device.type == "cuda" else None
            # The plain function, not the bound method: a bound method would
            # keep the model alive through the weak-keyed table.
            entry["fn"] = torch.compile(
                EncoderDecoder._static_logits,
                mode=mode,
                fullgraph=entry["fullgraph"],
                dynamic=False,
            )
        return entry["fn"]

    def _static_decode_step(
        self, tokens: Tensor, state: EncoderDecoderState, cache: StaticKVCache
    ) -> Tensor:
        cache.check_room(tokens.size(1))  # host-side: an overflow would be a device error
        args = (
            tokens,
            state.src_mask,
            cache.self_k,
            cache.self_v,
            cache.cross_k,
            cache.cross_v,
            cache.pos,
        )
        compiled = self._compiled_step(tokens.device)
        if compiled is None:
            logits = self._static_logits(*args)
        else:
            try:
                logits = compiled(self, *args)
            except Exception as err:  # any compiler failure: stay correct, just slower
                warnings.warn(
                    f"compile_decoding: the compiled decode step failed "
                    f"({type(err).__name__}: {err}); decoding eagerly from now on",
                    RuntimeWarning,
                    stacklevel=3,
                )
                _COMPILED_STEPS[self]["failed"] = True  # keep the pool
                # Safe to redo: the step only writes this step's keys/values.
                logits = self._static_logits(*args)
        cache.advance(tokens.size(1))
        return logits

    def _static_logits(
        self,
        tokens: Tensor,
        src_mask: Tensor,
        self_k: list[Tensor],
        self_v: list[Tensor],
        cross_k: Tensor,
        cross_v: Tensor,
        pos: Tensor,
    ) -> Tensor:
        """One decode step on static buffers: ``tokens`` ``(B, t)`` at positions ``pos ..``.

        A pure function of tensors (the cache view is rebuilt inside), so that
        ``torch.compile`` sees the same shapes at every step; it writes the
        new keys/values into ``self_k``/``self_v`` in place and returns the
        logits ``(B, V)`` for the next token.
        """
        cache = StaticKVCache(self_k, self_v, cross_k, cross_v, pos)
        t = tokens.size(1)
        emb = self.tgt_embed
        # Positions come from the device index, not a Python offset.
        pe = emb.positions(cache.capacity).index_select(0, cache.positions(t))
        x = emb.dropout(emb.tokens(tokens) + pe)
        hidden, _, _ = self.decoder(
            x,
            None,
            self_mask=cache.self_mask(t),
            is_causal=False,
            memory_mask=src_mask,
            cache=cache,
        )
        return self.output_proj(hidden[:, -1])

    # The protocol's names (attnkit.decoding.protocol.Stepper).
    def start(self, src_ids: Tensor, *, max_steps: int | None = None) -> EncoderDecoderState:
        """Encode ``src_ids`` ``(B, S)``; with ``max_steps``, use the static cache if supported."""
        if max_steps is not None and self.static_decoding_supported(max_steps):
            return self.encode(src_ids, capacity=max_steps, static=True)
        return self.encode(src_ids)

    def step(
        self, tokens: Tensor, state: EncoderDecoderState
    ) -> tuple[Tensor, EncoderDecoderState]:
        return self.decode_step(tokens, state)
