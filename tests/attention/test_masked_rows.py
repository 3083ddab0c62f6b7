"""A query row whose keys are all masked never makes NaN: forward or backward, any path.

Such rows happen for real: a batch row that is all padding, or left padding
under a causal mask. Every ``attend`` path must give zeros for them and
finite gradients everywhere (one NaN gradient poisons the whole update).
"""

from __future__ import annotations

import pytest
import torch

from attnkit.attention.functional import attend
from attnkit.models import EncoderDecoder, TransformerConfig
from attnkit.positions.relative import RelativePositionTerms, relative_index

B, H, T, D = 2, 2, 5, 8
DTYPES = [torch.float32, torch.bfloat16]


def _padding_mask() -> torch.Tensor:
    """(B, 1, T, T): batch 1 sees no key at all; batch 0's query 2 sees none either."""
    mask = torch.ones(B, 1, T, T, dtype=torch.bool)
    mask[0, :, :, 3:] = False  # ordinary key padding
    mask[0, :, 2, :] = False  # one dead row
    mask[1] = False  # a row of the batch that is all padding
    return mask


def _left_padding() -> torch.Tensor:
    """(B, 1, 1, T) key padding on the left: under a causal mask the first queries see nothing."""
    mask = torch.ones(B, 1, 1, T, dtype=torch.bool)
    mask[1, :, :, :2] = False
    return mask


def _qkv(dtype):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, T, D, generator=g).to(dtype).requires_grad_() for _ in range(3)]


def _relative(dtype, *, values: bool) -> tuple[RelativePositionTerms, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    key = torch.randn(2 * 3 + 1, D, generator=g).to(dtype).requires_grad_()
    value = torch.randn(2 * 3 + 1, D, generator=g).to(dtype).requires_grad_() if values else None
    terms = RelativePositionTerms(index=relative_index(T, T, 3), key=key, value=value)
    return terms, [t for t in (key, value) if t is not None]


def _general_score(q, k):  # any non-dot score takes the explicit path
    return (q @ k.transpose(-2, -1)) * 0.5


# name -> attend keyword arguments (without q, k, v), built per dtype.
CASES = {
    "sdpa": lambda dt: {"mask": _padding_mask()},
    "sdpa_dropout": lambda dt: {"mask": _padding_mask(), "dropout_p": 0.3},
    "reference": lambda dt: {"mask": _padding_mask(), "need_weights": True},
    "reference_dropout": lambda dt: {
        "mask": _padding_mask(),
        "need_weights": True,
        "dropout_p": 0.3,
    },
    "custom_score": lambda dt: {"mask": _padding_mask(), "score": _general_score},
    "causal_padding_sdpa": lambda dt: {"mask": _left_padding(), "is_causal": True},
    "causal_padding_reference": lambda dt: {
        "mask": _left_padding(),
        "is_causal": True,
        "need_weights": True,
    },
    "relative_key_and_value": lambda dt: {
        "mask": _padding_mask(),
        "dropout_p": 0.3,
        "position": _relative(dt, values=True),
    },
    "relative_key_only": lambda dt: {
        "mask": _padding_mask(),
        "position": _relative(dt, values=False),
    },
    "relative_weights": lambda dt: {
        "mask": _padding_mask(),
        "need_weights": True,
        "position": _relative(dt, values=True),
    },
}


def _dead_rows(kwargs) -> torch.Tensor:
    """(B, 1, T, 1): True where a query row may attend to no key."""
    mask = kwargs["mask"]
    if kwargs.get("is_causal"):
        mask = mask & torch.ones(T, T, dtype=torch.bool).tril()
    return ~mask.expand(B, 1, T, T).any(dim=-1, keepdim=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", list(CASES))
def test_fully_masked_rows_give_zeros_and_finite_gradients(case, dtype):
    torch.manual_seed(0)
    kwargs = CASES[case](dtype)
    tables: list[torch.Tensor] = []
    if "position" in kwargs:
        kwargs["position"], tables = kwargs["position"]
    dead = _dead_rows(kwargs)
    assert dead.any() and not dead.all()  # the case really has dead and live rows
    q, k, v = _qkv(dtype)

    out, weights = attend(q, k, v, **kwargs)

    assert torch.isfinite(out).all()
    assert (out.masked_select(dead.expand_as(out)) == 0).all()
    assert out.masked_select(~dead.expand_as(out)).abs().sum() > 0
    if kwargs.get("need_weights"):
        assert torch.isfinite(weights).all()
        assert (weights.masked_select(dead.expand_as(weights)) == 0).all()
    g = torch.Generator().manual_seed(2)
    (out.float() * torch.randn(out.shape, generator=g)).sum().backward()
    for name, t in [("q", q), ("k", k), ("v", v)] + [("table", t) for t in tables]:
        assert t.grad is not None and torch.isfinite(t.grad).all(), name


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("positions", ["sinusoidal", "relative"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_a_model_with_an_all_padding_source_row_stays_finite(dtype, positions, need_weights):
    config = TransformerConfig(d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                               num_decoder_layers=1, src_vocab_size=20, tgt_vocab_size=20,
                               max_len=32, positions=positions, dropout=0.1,
                               attention_dropout=0.1)  # fmt: skip
    torch.manual_seed(0)
    model = EncoderDecoder(config).to(dtype).train()
    src = torch.randint(3, 20, (2, 6))
    src[1] = config.pad_id  # nothing to attend to, in the encoder and in cross-attention
    tgt = torch.randint(3, 20, (2, 4))
    out = model(src, tgt, need_weights=need_weights)
    assert torch.isfinite(out.logits).all()
    out.logits.float().logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
