"""Model capabilities declared by the models (``attnkit.models.protocols``)."""

from __future__ import annotations

import torch

from attnkit.models import EncoderDecoder, RNNSeq2Seq, RNNSeq2SeqConfig, TransformerConfig
from attnkit.models.protocols import LinearLogits


def test_the_transformer_logits_are_its_hidden_states_times_logits_weight():
    for share in ("none", "all"):  # an output projection of its own, and a tied one
        config = TransformerConfig.from_preset(
            "small", d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
            num_decoder_layers=1, src_vocab_size=30, tgt_vocab_size=30, share_embeddings=share,
        )  # fmt: skip
        model = EncoderDecoder(config).eval()
        assert isinstance(model, LinearLogits)
        src, tgt = torch.randint(3, 30, (2, 5)), torch.randint(3, 30, (2, 4))
        out = model(src, tgt)
        hidden = model(src, tgt, compute_logits=False).hidden
        torch.testing.assert_close(out.logits, hidden @ model.logits_weight().T)


def test_the_rnn_does_not_claim_linear_logits():
    # Dropout and a bias stand between its features and its logits.
    model = RNNSeq2Seq(RNNSeq2SeqConfig.from_preset("small", src_vocab_size=30, tgt_vocab_size=30))
    assert not isinstance(model, LinearLogits)
