"""Label-smoothed cross-entropy: parity with torch, hand arithmetic, chunking."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.errors import UsageError
from attnkit.losses import (
    chunked_label_smoothed_cross_entropy,
    label_smoothed_cross_entropy,
)

PAD = 0


def test_hand_computed_three_classes():
    # logits (0, 0, ln 2) -> p = (1/4, 1/4, 1/2); gold class 2, eps = 0.3.
    # nll = -ln(1/2) = ln 2
    # uniform part = mean(-ln p) = (ln 4 + ln 4 + ln 2) / 3 = 5 ln 2 / 3
    # loss = 0.7 * ln 2 + 0.3 * 5 ln 2 / 3 = 0.7 ln 2 + 0.5 ln 2 = 1.2 ln 2
    logits = torch.tensor([[0.0, 0.0, math.log(2.0)]])
    out = label_smoothed_cross_entropy(logits, torch.tensor([2]), epsilon=0.3)
    assert out.loss.item() == pytest.approx(1.2 * math.log(2.0), rel=1e-6)
    assert out.nll.item() == pytest.approx(math.log(2.0), rel=1e-6)
    assert out.n_tokens.item() == 1


@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_matches_torch_cross_entropy_with_ignore_index(reduction):
    logits = torch.randn(3, 5, 11) * 3
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = PAD
    target[2, 1] = PAD
    out = label_smoothed_cross_entropy(
        logits, target, epsilon=0.1, ignore_index=PAD, reduction=reduction
    )
    ref = F.cross_entropy(
        logits.transpose(1, 2), target, label_smoothing=0.1, ignore_index=PAD, reduction=reduction
    )
    nll = F.cross_entropy(logits.transpose(1, 2), target, ignore_index=PAD, reduction=reduction)
    torch.testing.assert_close(out.loss, ref)
    torch.testing.assert_close(out.nll, nll)
    assert out.n_tokens.item() == 12


def test_ignored_targets_contribute_nothing():
    logits = torch.randn(4, 7, requires_grad=True)
    target = torch.tensor([3, PAD, 5, PAD])
    full = label_smoothed_cross_entropy(logits, target, ignore_index=PAD)
    kept = label_smoothed_cross_entropy(logits[[0, 2]], target[[0, 2]], ignore_index=PAD)
    torch.testing.assert_close(full.loss, kept.loss)
    full.loss.backward()
    assert torch.all(logits.grad[[1, 3]] == 0)


def test_bf16_logits_are_reduced_in_fp32():
    logits = (torch.randn(64, 1000) * 4).bfloat16()
    target = torch.randint(0, 1000, (64,))
    out = label_smoothed_cross_entropy(logits, target, epsilon=0.1)
    ref = F.cross_entropy(logits.float(), target, label_smoothing=0.1, reduction="sum")
    assert out.loss.dtype == torch.float32
    torch.testing.assert_close(out.loss, ref)


def test_all_ignored_mean_is_zero_not_nan():
    out = label_smoothed_cross_entropy(
        torch.randn(2, 5), torch.tensor([PAD, PAD]), ignore_index=PAD, reduction="mean"
    )
    assert out.loss.item() == 0.0 and out.n_tokens.item() == 0


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_chunked_equals_plain_in_value_and_gradients(reduction):
    hidden = torch.randn(2, 9, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(13, 8, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 13, (2, 9))
    target[1, 6:] = PAD
    kw = dict(epsilon=0.1, ignore_index=PAD, reduction=reduction)

    plain = label_smoothed_cross_entropy(hidden @ weight.T, target, **kw)
    g_plain = torch.autograd.grad(plain.loss, (hidden, weight))
    chunked = chunked_label_smoothed_cross_entropy(hidden, weight, target, chunk_size=4, **kw)
    g_chunked = torch.autograd.grad(chunked.loss, (hidden, weight))

    torch.testing.assert_close(chunked.loss, plain.loss.float())
    torch.testing.assert_close(chunked.nll, plain.nll.float())
    assert chunked.n_tokens.item() == plain.n_tokens.item() == 15
    for got, want in zip(g_chunked, g_plain):
        torch.testing.assert_close(got, want)


def test_chunked_with_bias_and_no_grad():
    hidden, weight, bias = torch.randn(10, 6), torch.randn(9, 6), torch.randn(9)
    target = torch.randint(0, 9, (10,))
    with torch.no_grad():
        chunked = chunked_label_smoothed_cross_entropy(
            hidden, weight, target, bias=bias, chunk_size=3
        )
    plain = label_smoothed_cross_entropy(F.linear(hidden, weight, bias), target)
    torch.testing.assert_close(chunked.loss, plain.loss)


def test_bad_options_name_the_option():
    with pytest.raises(UsageError, match="epsilon"):
        label_smoothed_cross_entropy(torch.randn(2, 3), torch.tensor([0, 1]), epsilon=1.0)
    with pytest.raises(UsageError, match="reduction"):
        label_smoothed_cross_entropy(torch.randn(2, 3), torch.tensor([0, 1]), reduction="avg")
    with pytest.raises(ValueError, match="disagree"):
        label_smoothed_cross_entropy(torch.randn(2, 3), torch.tensor([0, 1, 2]))
