"""Shifted-window attention (Swin) is exactly a dense attention under the equivalent mask."""

import pytest
import torch

from attnkit.attention.functional import attend
from attnkit.attention.windows import (
    WindowAttention,
    relative_position_index,
    shifted_window_mask,
    window_attention_dense_equivalent,
    window_merge,
    window_partition,
)


def test_partition_and_merge_are_inverse_and_windows_are_contiguous_blocks():
    x = torch.arange(2 * 8 * 12 * 3, dtype=torch.float64).view(2, 8, 12, 3)
    windows = window_partition(x, 4)
    assert windows.shape == (2 * 2 * 3, 16, 3)
    assert torch.equal(window_merge(windows, 4, 8, 12), x)
    # Window 1 of image 0 is rows 0..3, columns 4..7, row-major.
    assert torch.equal(windows[1].view(4, 4, 3), x[0, 0:4, 4:8])


def test_relative_position_index_names_each_offset_once():
    m = 3
    index = relative_position_index(m)
    assert index.shape == (9, 9)
    assert index.min() == 0 and index.max() == (2 * m - 1) ** 2 - 1
    assert torch.equal(index.diagonal(), torch.full((9,), (m - 1) * (2 * m - 1) + m - 1))
    # Same offset, same row: (0,0)->(1,2) and (1,0)->(2,2) are both offset (-1, -2).
    assert index[0, 5] == index[3, 8]
    assert index[0, 5] != index[5, 0]


def test_shifted_window_mask_separates_the_wrapped_regions():
    mask = shifted_window_mask(8, 8, window=4, shift=2)
    assert mask.shape == (4, 16, 16)
    assert mask[0].all()  # the first window holds no wrapped token
    last = mask[3]  # bottom-right: 4 regions of 2x2 tokens each
    assert last.sum() == 4 * 4 * 4
    assert last[0, 0] and not last[0, 2] and not last[0, 8]


@pytest.mark.parametrize("grid,window,shift", [((8, 8), 4, 0), ((8, 8), 4, 2), ((6, 9), 3, 1),
                                               ((12, 12), 6, 3)])  # fmt: skip
def test_shifted_window_attention_equals_dense_attention_under_the_equivalent_mask(
    grid, window, shift
):
    torch.manual_seed(0)
    module = WindowAttention(16, num_heads=2, window=window).double()
    torch.nn.init.normal_(module.bias_table, std=1.0)  # a bias large enough to matter
    x = torch.randn(2, *grid, 16, dtype=torch.float64)
    windowed, _ = module(x, shift)
    dense = window_attention_dense_equivalent(module, x, shift)
    torch.testing.assert_close(windowed, dense, rtol=1e-12, atol=1e-12)


def test_a_window_covering_the_whole_grid_is_global_attention():
    torch.manual_seed(0)
    module = WindowAttention(8, num_heads=2, window=5).double()
    torch.nn.init.normal_(module.bias_table, std=1.0)
    x = torch.randn(3, 5, 5, 8, dtype=torch.float64)
    windowed, weights = module(x, need_weights=True)
    # Global attention over the 25 tokens with the table's bias, written out by hand.
    tokens = x.reshape(3, 25, 8)
    q, k, v = module.qkv_proj(tokens).view(3, 25, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
    scores = q @ k.transpose(-2, -1) / 2.0 + module.position_bias()
    out = scores.softmax(-1) @ v
    out = module.out_proj(out.transpose(1, 2).reshape(3, 25, 8)).view(3, 5, 5, 8)
    torch.testing.assert_close(windowed, out, rtol=1e-12, atol=1e-12)
    assert weights is not None and weights.shape == (3, 1, 2, 25, 25)
    torch.testing.assert_close(weights[:, 0], scores.softmax(-1), rtol=1e-12, atol=1e-12)


def test_the_dense_equivalent_is_not_trivially_equal_when_the_mask_is_dropped():
    """The test above can fail: without the region mask the wrapped tokens mix."""
    torch.manual_seed(0)
    module = WindowAttention(8, num_heads=2, window=4).double()
    x = torch.randn(1, 8, 8, 8, dtype=torch.float64)
    rolled = torch.roll(x, shifts=(-2, -2), dims=(1, 2))
    windows = window_partition(rolled, 4)
    q, k, v = module.qkv_proj(windows).view(-1, 16, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
    unmasked, _ = attend(q, k, v, bias=module.position_bias())
    unmasked = module.out_proj(unmasked.transpose(1, 2).reshape(-1, 16, 8))
    unmasked = torch.roll(window_merge(unmasked, 4, 8, 8), shifts=(2, 2), dims=(1, 2))
    assert not torch.allclose(unmasked, window_attention_dense_equivalent(module, x, 2))
