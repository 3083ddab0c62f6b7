import torch

from attnkit.attention import KVCache


def test_reorder_permutes_exactly():
    cache = KVCache(2, 3, 1, 2, capacity=4)
    k = torch.arange(3, dtype=torch.float32).view(3, 1, 1, 1).expand(3, 1, 1, 2)
    for layer in range(2):
        cache.update(layer, k + 10 * layer, -(k + 10 * layer))
    cache.set_cross(
        torch.arange(3.0).view(1, 3, 1, 1, 1).expand(2, 3, 1, 5, 2).clone(),
        torch.arange(3.0).view(1, 3, 1, 1, 1).expand(2, 3, 1, 5, 2).clone(),
    )
    cache.advance()
    idx = torch.tensor([2, 2, 0])
    cache.reorder(idx)
    for layer in range(2):
        k_all, v_all = cache.update(layer, torch.zeros(3, 1, 1, 2), torch.zeros(3, 1, 1, 2))
        assert k_all[:, 0, 0, 0].tolist() == [2 + 10 * layer, 2 + 10 * layer, 10 * layer]
        assert v_all[:, 0, 0, 0].tolist() == [-(2 + 10 * layer), -(2 + 10 * layer), -10 * layer]
        ck, _ = cache.cross(layer)
        assert ck[:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]


def test_update_grows_past_capacity_and_keeps_contents():
    cache = KVCache(1, 1, 1, 1, capacity=1)
    for t in range(5):
        k_all, _ = cache.update(0, torch.full((1, 1, 1, 1), float(t)), torch.zeros(1, 1, 1, 1))
        cache.advance()
    assert k_all.flatten().tolist() == [0, 1, 2, 3, 4]
    assert cache.capacity >= 5
