"""T5's relative position bias (Raffel et al., 2020, §2.1): one learned scalar per head and bucket.

Instead of position vectors, each attention score gets a bias that depends only
on the key's offset from the query, ``key - query``. Offsets are put into
``num_buckets`` buckets: small offsets each get their own bucket, larger ones
share logarithmically wider buckets up to ``max_distance``, beyond which every
offset shares the last bucket. A bidirectional (encoder) bias keeps separate
buckets for keys before and after the query (half the buckets each); a causal
(decoder) bias only sees keys at or before the query. One table of
``(num_buckets, h)`` serves every layer of a stack (T5 computes it in the first
layer and reuses it), so a stack receives ONE ``T5RelativeBias``.

The bucketing is transformers' ``T5Attention._relative_position_bucket`` (the
parity test compares them offset by offset).

Shapes: ``h`` heads, ``Tq`` queries, ``Tk`` keys.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnkit.roles import Roles


def relative_position_bucket(
    relative_position: Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """The bucket (long, same shape) of each offset ``key - query``."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets  # keys after the query
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)  # a later key (masked anyway) is distance 0
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # Logarithmic buckets from max_exact to max_distance; the clamp avoids log(0) below.
    log_ratio = torch.log(distance.clamp(min=1).float() / max_exact) / math.log(
        max_distance / max_exact
    )
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class T5RelativeBias(nn.Module):
    """``(h, Tq, Tk)`` additive score bias from a ``(num_buckets, h)`` table.

    Args:
        num_heads: heads h.
        bidirectional: True for an encoder, False for a causal decoder.
        num_buckets, max_distance: T5's 32 and 128 by default.
    """

    def __init__(
        self, num_heads: int, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
    ):
        super().__init__()
        if num_buckets < 2 or max_distance < num_buckets // 2:
            raise ValueError(
                f"num_buckets: need >= 2 buckets and max_distance >= num_buckets / 2, got "
                f"{num_buckets} and {max_distance}"
            )
        self.bidirectional = bidirectional
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, num_heads)

    def roles(self) -> Roles:
        return Roles(parameters={"table.weight": "relative_position"})

    def forward(self, query_positions: Tensor, num_keys: int) -> Tensor:
        """The bias of queries at ``query_positions`` ``(Tq,)`` over keys ``0 .. Tk - 1``."""
        keys = torch.arange(num_keys, device=query_positions.device)
        offsets = keys[None, :] - query_positions[:, None]  # (Tq, Tk): key - query
        buckets = relative_position_bucket(
            offsets, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )  # fmt: skip
        return self.table(buckets).permute(2, 0, 1)  # (h, Tq, Tk)
