import torch

from attnkit.attention import causal_mask, causal_padding_mask, padding_mask


def test_padding_mask_marks_real_tokens():
    ids = torch.tensor([[4, 5, 0], [4, 0, 0]])
    m = padding_mask(ids, pad_id=0)
    assert m.shape == (2, 1, 1, 3)
    assert m[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]


def test_causal_mask_is_lower_triangular_and_shifts_for_cached_queries():
    assert causal_mask(3).tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert causal_mask(2, 4).tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


def test_causal_padding_mask_combines_both():
    ids = torch.tensor([[4, 5, 0]])
    m = causal_padding_mask(ids, pad_id=0)[0, 0]
    assert m.tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
