"""T5's relative position bias: buckets equal transformers' offset by offset."""

import pytest
import torch

from attnkit.positions.t5_relative import T5RelativeBias, relative_position_bucket


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20), (16, 16)])
def test_buckets_equal_transformers(bidirectional, num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    offsets = torch.arange(-300, 301)[None, :]
    ours = relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    theirs = T5Attention._relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(ours, theirs)


def test_small_offsets_get_their_own_buckets_and_far_ones_share_the_last():
    buckets = relative_position_bucket(
        torch.arange(-200, 201), bidirectional=True, num_buckets=32, max_distance=128
    )
    at = {o: int(b) for o, b in zip(range(-200, 201), buckets)}
    assert len({at[o] for o in range(-7, 8)}) == 15  # exact buckets near the query
    assert at[1] != at[-1]  # before and after the query differ in an encoder
    assert at[128] == at[200] == 31 and at[-128] == at[-200] == 15
    causal = relative_position_bucket(
        torch.arange(-5, 6), bidirectional=False, num_buckets=32, max_distance=128
    )
    assert causal[5:].eq(0).all()  # the query itself and later keys: bucket 0


def test_the_bias_of_a_decode_step_is_the_last_row_of_the_full_bias():
    torch.manual_seed(0)
    bias = T5RelativeBias(4, bidirectional=False, num_buckets=8, max_distance=16)
    full = bias(torch.arange(10), 10)
    assert full.shape == (4, 10, 10)
    step = bias(torch.tensor([9]), 10)
    torch.testing.assert_close(step, full[:, 9:10])
    # The bias depends on the offset only: shifting queries and keys together keeps it.
    torch.testing.assert_close(full[:, 3, :4], full[:, 8, 5:9])


def test_the_bias_equals_transformers_compute_bias():
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(d_model=16, d_kv=4, num_heads=4, relative_attention_num_buckets=8,
                      relative_attention_max_distance=20, is_decoder=False)  # fmt: skip
    theirs = T5Attention(config, has_relative_attention_bias=True)
    ours = T5RelativeBias(4, bidirectional=True, num_buckets=8, max_distance=20)
    ours.table.weight.data.copy_(theirs.relative_attention_bias.weight.data)
    expected = theirs.compute_bias(7, 7)[0]  # (h, Tq, Tk)
    torch.testing.assert_close(ours(torch.arange(7), 7), expected)
