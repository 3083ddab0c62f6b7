"""The attnkit stack equals torch.nn.Transformer with the same weights copied in."""

import pytest
import torch

from attnkit.attention import padding_mask
from attnkit.interop.torch_nn import to_torch_nn_transformer
from attnkit.models import EncoderDecoder, TransformerConfig


@pytest.mark.parametrize("norm_position", ["post", "pre"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_full_stack_equals_torch_nn_transformer(norm_position, activation):
    cfg = TransformerConfig.from_preset(
        "small",
        d_model=64,
        d_ff=128,
        src_vocab_size=50,
        tgt_vocab_size=50,
        norm_position=norm_position,
        activation=activation,
    )
    model = EncoderDecoder(cfg).eval()
    ref = to_torch_nn_transformer(model).eval()

    src = torch.randint(3, 50, (3, 9))
    tgt = torch.randint(3, 50, (3, 7))
    tgt[:, 0] = 1
    src[1, 6:] = 0
    src[2, 3:] = 0
    tgt[2, 5:] = 0
    with torch.no_grad():
        ours = model(src, tgt).logits
        causal = torch.ones(7, 7, dtype=torch.bool).triu(1)  # nn: True = masked
        hidden = ref(
            model.src_embed(src),
            model.tgt_embed(tgt),
            tgt_mask=causal,
            src_key_padding_mask=src == 0,
            memory_key_padding_mask=src == 0,
            tgt_key_padding_mask=tgt == 0,
        )
        theirs = model.output_proj(hidden)
    real = padding_mask(tgt, 0)[:, 0, 0]  # compare at real target positions
    diff = (ours - theirs)[real].abs().max().item()
    assert diff <= 1e-5, diff
