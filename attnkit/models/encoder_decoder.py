"""The encoder-decoder Transformer of "Attention Is All You Need" (§3, Figure 1).

Training uses ``forward(src_ids, tgt_ids)``; decoding uses the stepping
protocol of ``attnkit.decoding``: ``encode``/``start`` once per source batch,
then ``decode_step``/``step`` one token at a time against an explicit KV cache.

Shapes: ``B`` batch, ``S`` source length, ``T`` target length, ``D`` d_model,
``V`` vocabulary, ``h`` heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.attention.cache import KVCache
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
        c.d_model, c.num_heads, dropout=c.attention_dropout, relative_positions=relative
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
    cache: KVCache

    def reorder(self, indices: Tensor) -> EncoderDecoderState:
        """Keep batch rows ``indices`` ``(B',)``, e.g. to follow beams."""
        self.cache.reorder(indices)
        self.src_mask = self.src_mask.index_select(0, indices)
        return self


# -- the model ---------------------------------------------------------------------


class EncoderDecoder(nn.Module):
    """The Transformer. Build it from a ``TransformerConfig``."""

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

    def encode(self, src_ids: Tensor, *, capacity: int | None = None) -> EncoderDecoderState:
        """Run the encoder once and precompute every layer's cross-attention K/V."""
        c = self.config
        src_mask = padding_mask(src_ids, self.pad_id)
        memory, _ = self.encoder(self.src_embed(src_ids), mask=src_mask)
        kv = [layer.cross_attn.project_kv(memory) for layer in self.decoder.layers]
        cross_k = torch.stack([k for k, _ in kv])
        cross_v = torch.stack([v for _, v in kv])
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
        x = self.tgt_embed(tokens, offset=cache.length)
        hidden, _, _ = self.decoder(
            x, None, is_causal=True, memory_mask=state.src_mask, cache=cache
        )
        cache.advance(tokens.size(1))
        return self.output_proj(hidden[:, -1]), state

    # The protocol's names (attnkit.decoding.protocol.Stepper).
    def start(self, src_ids: Tensor) -> EncoderDecoderState:
        return self.encode(src_ids)

    def step(
        self, tokens: Tensor, state: EncoderDecoderState
    ) -> tuple[Tensor, EncoderDecoderState]:
        return self.decode_step(tokens, state)
