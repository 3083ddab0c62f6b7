"""The two caches behind one protocol: each layer writes through its own view."""

import pytest
import torch

from attnkit.attention import (
    DecoderCache,
    KVCache,
    LayerCache,
    StaticBufferPool,
    StaticKVCache,
)


def test_both_caches_implement_the_protocol():
    growing = KVCache(2, 1, 1, 2)
    static = StaticKVCache.allocate(2, 1, 1, 2, capacity=3, dtype=torch.float32, device="cpu")
    for cache in (growing, static):
        assert isinstance(cache, DecoderCache)
        assert len(cache.layers()) == 2
        assert all(isinstance(view, LayerCache) for view in cache.layers())
        assert all(view.cross is None for view in cache.layers())  # a decoder-only cache


def test_reorder_permutes_exactly():
    cache = KVCache(2, 3, 1, 2, capacity=4)
    k = torch.arange(3, dtype=torch.float32).view(3, 1, 1, 1).expand(3, 1, 1, 2)
    for layer in range(2):
        cache.layers()[layer].update(k + 10 * layer, -(k + 10 * layer))
    cache.set_cross(
        torch.arange(3.0).view(1, 3, 1, 1, 1).expand(2, 3, 1, 5, 2).clone(),
        torch.arange(3.0).view(1, 3, 1, 1, 1).expand(2, 3, 1, 5, 2).clone(),
    )
    cache.advance()
    idx = torch.tensor([2, 2, 0])
    cache.reorder(idx)
    for layer in range(2):
        k_all, v_all = cache.layers()[layer].update(
            torch.zeros(3, 1, 1, 2), torch.zeros(3, 1, 1, 2)
        )
        assert k_all[:, 0, 0, 0].tolist() == [2 + 10 * layer, 2 + 10 * layer, 10 * layer]
        assert v_all[:, 0, 0, 0].tolist() == [-(2 + 10 * layer), -(2 + 10 * layer), -10 * layer]
        ck, _ = cache.layers()[layer].cross
        assert ck[:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]


def test_update_grows_past_capacity_and_keeps_contents():
    cache = KVCache(1, 1, 1, 1, capacity=1)
    for t in range(5):
        k_all, _ = cache.layers()[0].update(
            torch.full((1, 1, 1, 1), float(t)), torch.zeros(1, 1, 1, 1)
        )
        cache.advance()
    assert k_all.flatten().tolist() == [0, 1, 2, 3, 4]
    assert cache.capacity >= 5


# -- the static cache of the fast decoding path ------------------------------------


def _static(batch: int, capacity: int = 3, pool=None) -> StaticKVCache:
    rows = torch.arange(float(batch)).view(1, batch, 1, 1, 1)
    cross = rows.expand(2, batch, 1, 4, 2).clone()
    return StaticKVCache.allocate(
        2, batch, 1, 2, capacity=capacity, dtype=torch.float32, device="cpu",
        cross_k=cross, cross_v=-cross, pool=pool,
    )  # fmt: skip


def _fill(cache: StaticKVCache, batch: int) -> None:
    """Row b's key at step t is 100 * t + 10 * layer + b (values: its negation)."""
    for t in range(2):
        for layer in range(2):
            k = (100 * t + 10 * layer + torch.arange(float(batch))).view(batch, 1, 1, 1)
            cache.layers()[layer].update(k.expand(batch, 1, 1, 2), -k.expand(batch, 1, 1, 2))
        cache.advance()


def test_static_update_writes_at_pos_and_masks_the_rest():
    cache = _static(2, capacity=4)
    _fill(cache, 2)
    assert cache.length == 2 and cache.pos.tolist() == [2]
    k, v = cache.layers()[1].update(torch.full((2, 1, 1, 2), 7.0), torch.zeros(2, 1, 1, 2))
    assert k.shape == (2, 1, 4, 2)  # the whole capacity, every step
    assert k[:, 0, :, 0].tolist() == [[10, 110, 7, 0], [11, 111, 7, 0]]
    assert cache.self_mask(1).tolist() == [[[[True, True, True, False]]]]
    assert cache.self_mask(2)[0, 0].tolist() == [[True, True, True, False], [True] * 4]
    cache.check_room(2)
    with pytest.raises(ValueError, match="capacity"):
        cache.check_room(3)


@pytest.mark.parametrize("pooled", [False, True])
def test_static_reorder_permutes_exactly(pooled):
    cache = _static(3, pool=StaticBufferPool() if pooled else None)
    _fill(cache, 3)
    address = cache.self_k[1].data_ptr()
    idx = torch.tensor([2, 2, 0])
    cache.reorder(idx)
    for layer in range(2):
        k, v = cache.self_k[layer][:, 0, :2, 0], cache.self_v[layer][:, 0, :2, 0]
        assert k.tolist() == [[100 * t + 10 * layer + b for t in range(2)] for b in (2, 2, 0)]
        assert torch.equal(v, -k)
        ck, cv = cache.layers()[layer].cross
        assert ck[:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0] and torch.equal(cv, -ck)
    assert (cache.self_k[1].data_ptr() == address) == pooled  # pooled: copied in place
    cache.reorder(torch.tensor([0, 0, 1, 1, 2, 2]))  # a batch-size change (beam expansion)
    assert cache.self_k[0].size(0) == 6
    assert cache.self_k[0][:, 0, 0, 0].tolist() == [2, 2, 2, 2, 0, 0]


def test_pool_hands_a_buffer_out_again_only_once_its_owner_is_gone():
    pool = StaticBufferPool()
    first = _static(2, pool=pool)
    addresses = first.self_k[0].data_ptr(), first.cross_k.data_ptr()
    second = _static(2, pool=pool)  # first is alive: fresh buffers
    assert second.self_k[0].data_ptr() not in addresses
    del first, second
    third = _static(2, pool=pool)
    assert (third.self_k[0].data_ptr(), third.cross_k.data_ptr()) == addresses
    assert third.pos.tolist() == [0] and not third.self_k[0].any()  # handed out zeroed


def test_static_reorder_can_leave_the_cross_keys_in_place():
    cache = _static(3)
    _fill(cache, 3)
    cross = cache.cross_k.clone()
    cache.reorder(torch.tensor([1, 1, 0]), cross=False)  # rows that share a source
    assert torch.equal(cache.cross_k, cross)
    assert cache.self_k[0][:, 0, 0, 0].tolist() == [1, 1, 0]
    # Six rows sharing the three sources (beams): the cross keys stay three rows.
    cache.reorder(torch.tensor([0, 0, 1, 1, 2, 2]), cross=False)
    assert cache.self_k[0].size(0) == 6 and torch.equal(cache.cross_k, cross)
    # Explicit source rows: the cross keys keep rows 2 and 0.
    cache.reorder(torch.tensor([5, 0]), cross=torch.tensor([2, 0]))
    assert cache.self_k[0][:, 0, 0, 0].tolist() == [0, 1]
    assert torch.equal(cache.cross_k, cross[:, [2, 0]])


@pytest.mark.parametrize("filled", [0, 1, 3])
def test_growing_cache_reorder_moves_the_filled_prefix_into_a_spare(filled):
    cache = KVCache(2, 3, 1, 1, capacity=4)
    for t in range(filled):
        for layer, view in enumerate(cache.layers()):
            k = torch.tensor([100.0 * t + 10 * layer + b for b in range(3)]).view(3, 1, 1, 1)
            view.update(k, -k)
        cache.advance()
    first = cache.self_k
    cache.reorder(torch.tensor([2, 0, 0]))
    cache.reorder(torch.tensor([1, 2, 0]))  # now rows 0, 0, 2 of the start
    assert cache.self_k.data_ptr() == first.data_ptr()  # two swaps: back in the first buffer
    expect = [[[100 * t + 10 * layer + b for t in range(filled)] for b in (0, 0, 2)]
              for layer in range(2)]  # fmt: skip
    assert cache.self_k[:, :, 0, :filled, 0].tolist() == expect
    assert torch.equal(cache.self_v[:, :, :, :filled], -cache.self_k[:, :, :, :filled])


@pytest.mark.parametrize("seed", range(3))
def test_growing_cache_moves_few_changed_rows_in_place(seed):
    torch.manual_seed(seed)
    rows, filled = 10, 3
    cache = KVCache(2, rows, 2, 3, capacity=5)
    for _ in range(filled):
        for view in cache.layers():
            k = torch.randn(rows, 2, 1, 3)
            view.update(k, -k)
        cache.advance()
    want = cache.self_k[:, :, :, :filled].clone()
    buffer = cache.self_k.data_ptr()
    for changed in (0, 1, 4, 9):  # up to 4 of 10 rows: in place; 9: gathered into the spare
        indices = torch.arange(rows)
        at = torch.randperm(rows)[:changed]
        indices[at] = torch.randint(0, rows, (changed,))
        cache.reorder(indices)
        want = want[:, indices]
        assert torch.equal(cache.self_k[:, :, :, :filled], want)
        assert torch.equal(cache.self_v[:, :, :, :filled], -want)
        moved = int((indices != torch.arange(rows)).sum())
        assert (cache.self_k.data_ptr() == buffer) == (moved <= 4)
