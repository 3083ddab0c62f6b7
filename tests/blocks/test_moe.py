"""Mixture-of-experts FFN: sparse dispatch, capacity, auxiliary losses, gradients (fp64)."""

from __future__ import annotations

import pytest
import torch

from attnkit.blocks.moe import MoEFeedForward, combine_aux
from attnkit.blocks.residual import Residual

TOL = dict(atol=1e-10, rtol=1e-10)


def make(num_experts=4, top_k=2, **kw):
    torch.manual_seed(0)
    return MoEFeedForward(6, 10, num_experts, top_k, **kw).double()


def every_expert(moe, x):
    """Reference: run all N experts on every token, weight by the top-k gates scattered to N."""
    flat = x.reshape(-1, x.size(-1))
    probs = torch.softmax(flat @ moe.router.weight.t(), dim=-1)
    top, idx = probs.topk(moe.top_k, dim=-1)
    if moe.normalize_gates:
        top = top / top.sum(-1, keepdim=True)
    weights = torch.zeros_like(probs).scatter(1, idx, top)  # (n, N)
    outs = torch.stack([expert(flat) for expert in moe.experts], dim=1)  # (n, N, D)
    return (weights[..., None] * outs).sum(1).reshape(x.shape)


@pytest.mark.parametrize("top_k,capacity", [(2, None), (1, None), (2, 8.0), (3, 4.0)])
def test_sparse_dispatch_equals_every_expert_weighted(top_k, capacity):
    moe = make(top_k=top_k, capacity_factor=capacity)
    x = torch.randn(3, 5, 6, dtype=torch.float64)
    y, aux = moe(x)
    torch.testing.assert_close(y, every_expert(moe, x), **TOL)
    assert int(aux.dropped) == 0 and aux.assignments == 15 * top_k
    torch.testing.assert_close(aux.utilisation.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_uniform_routing_gives_switch_loss_exactly_one():
    for top_k in (1, 2):
        moe = make(top_k=top_k)
        torch.nn.init.zeros_(moe.router.weight)
        _, aux = moe(torch.randn(2, 8, 6, dtype=torch.float64))
        assert aux.load_balancing_loss.item() == 1.0
        # Zero logits: logsumexp = log N for every token.
        torch.testing.assert_close(aux.z_loss, torch.tensor(4.0).log().square().double())


def test_balanced_loss_is_lowest_for_balanced_routing():
    moe = make(num_experts=2, top_k=1)
    with torch.no_grad():
        moe.router.weight.copy_(torch.eye(2, 6, dtype=torch.float64) * 5)
    one_sided = torch.zeros(1, 4, 6, dtype=torch.float64)
    one_sided[..., 0] = 1.0
    mixed = one_sided.clone()
    mixed[0, 2:] = torch.tensor([0.0, 1.0, 0, 0, 0, 0], dtype=torch.float64)
    assert moe(one_sided)[1].load_balancing_loss > 1.9  # f = (1, 0), P_0 ~ 1
    assert moe(mixed)[1].load_balancing_loss < 1.01


def crafted_moe(top_k, capacity_factor):
    """d_model 2, two experts, router logits = the token itself."""
    moe = MoEFeedForward(2, 3, 2, top_k, capacity_factor=capacity_factor).double()
    with torch.no_grad():
        moe.router.weight.copy_(torch.eye(2, dtype=torch.float64))
    return moe


def test_capacity_drops_are_counted_top1():
    moe = crafted_moe(1, 0.5)  # capacity ceil(0.5 * 4 * 1 / 2) = 1
    x = torch.tensor([[[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    y, aux = moe(x)
    assert moe.capacity(4) == 1
    assert int(aux.dropped) == 2 and aux.drop_rate == 0.5  # tokens 1 and 2 over expert 0's room
    assert (y[0, 1:3] == 0).all()  # dropped tokens: only the residual will carry them
    ref = every_expert(moe, x)
    torch.testing.assert_close(y[0, [0, 3]], ref[0, [0, 3]], **TOL)
    torch.testing.assert_close(aux.utilisation, torch.tensor([0.75, 0.25], dtype=torch.float64))


def test_capacity_serves_first_choices_before_second_choices():
    # Expert queues: e0 gets first choices t0, t2 then second choice t1; e1 gets
    # first choice t1 then second choices t0, t2. Capacity 2: t1->e0 and t2->e1 drop.
    moe = crafted_moe(2, 0.5)
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]]], dtype=torch.float64)
    y, aux = moe(x)
    assert moe.capacity(3) == 2 and int(aux.dropped) == 2
    flat = x[0]
    probs = torch.softmax(flat, dim=-1)  # top-2 of 2: gates are the probabilities
    e0, e1 = moe.experts[0](flat), moe.experts[1](flat)
    expected = torch.stack(
        [probs[0, 0] * e0[0] + probs[0, 1] * e1[0], probs[1, 1] * e1[1], probs[2, 0] * e0[2]]
    )
    torch.testing.assert_close(y[0], expected, **TOL)


def test_gradients_flow_to_the_router_and_experts():
    for top_k in (1, 2):
        moe = make(top_k=top_k, capacity_factor=1.25)
        x = torch.randn(2, 6, 6, dtype=torch.float64, requires_grad=True)
        y, aux = moe(x)
        # The main loss alone reaches the router through the gates ...
        (g,) = torch.autograd.grad(y.square().sum(), moe.router.weight, retain_graph=True)
        assert g.abs().sum() > 0
        # ... and so do both auxiliary losses.
        (g,) = torch.autograd.grad(
            aux.load_balancing_loss + aux.z_loss, moe.router.weight, retain_graph=True
        )
        assert g.abs().sum() > 0
        y.sum().backward()
        assert all(p.grad is not None for e in moe.experts for p in e.parameters())


def test_padding_is_not_routed():
    moe = make()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    real = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    y, aux = moe(x, real)
    assert (y[1, 3:] == 0).all() and aux.assignments == 8 * 2
    y_short, _ = moe(x[1:, :3])
    torch.testing.assert_close(y[1:, :3], y_short, **TOL)


def test_residual_wrapper_and_combined_reports():
    moe = make()
    res = Residual(6, 0.0, "pre").double()
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    out, aux = res(x, moe)
    assert out.shape == x.shape and aux.assignments == 12
    both = combine_aux([aux, aux])
    assert both.assignments == 24
    torch.testing.assert_close(both.load_balancing_loss, aux.load_balancing_loss)


def test_bad_arguments_name_the_field():
    for kw, field in [
        (dict(num_experts=0), "num_experts"),
        (dict(top_k=5), "top_k"),
        (dict(capacity_factor=0.0), "capacity_factor"),
    ]:
        args = dict(num_experts=4, top_k=2) | kw
        with pytest.raises(ValueError, match=field):
            MoEFeedForward(6, 10, **args)
