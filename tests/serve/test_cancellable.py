"""Cancellation at step boundaries, on the tiny trained checkpoints, through the engine.

The ``spy`` fixture puts a stepper between the engine and the model that counts
the steps the model really takes and cancels handles at a chosen step, as a
disconnect would.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnkit.checkpoints.loading import load_model
from attnkit.serve.cancellable import CancellableStepper, Owners, _OwnedState
from attnkit.serve.handles import CLIENT_GONE, RequestCancelled, RequestHandle
from attnkit.serve.model_host import ModelHost

LONG = "nine hundred ninety-nine thousand nine hundred ninety-nine"


@pytest.fixture(scope="module")
def engine(checkpoint) -> ModelHost:
    return ModelHost(load_model(checkpoint("transformer")))


def test_a_cancelled_request_stops_its_rows_and_leaves_the_others_exact(engine, spy):
    # A: two short texts; B: a long text and "forty-two", which C sends too.
    a, b, c = RequestHandle(), RequestHandle(), RequestHandle()
    requests = [(a, ["two", "seven"]), (b, [LONG, "forty-two"]), (c, ["forty-two"])]
    sources = [s for _, texts in requests for s in engine.encode_sources(texts)]
    owners = [h for h, texts in requests for _ in texts]
    options: dict[str, Any] = {"beam": 3, "alpha": 0.6, "nbest": 2}

    stepper = spy(engine)
    full = engine.translate(sources, **options, handles=owners)
    steps_uncancelled = stepper.steps
    assert all(not h.cancelled for h in (a, b, c))

    stepper = spy(engine, lambda n: n == 2 and b.cancel(CLIENT_GONE))
    cut = engine.translate(sources, **options, handles=owners)
    # B's long sentence no longer holds the batch: it ends with A's and C's.
    assert stepper.steps < steps_uncancelled, (stepper.steps, steps_uncancelled)
    for i in (0, 1, 3, 4):  # A's texts, B's "forty-two" (shared with C), C's
        assert cut[i].tokens == full[i].tokens
        assert [h.tokens for h in cut[i].nbest[0]] == [h.tokens for h in full[i].nbest[0]]
        assert cut[i].scores == pytest.approx(full[i].scores, abs=1e-5)
    assert cut[2].tokens != full[2].tokens  # B's own sentence was cut short


def test_a_batch_whose_requests_are_all_gone_stops_at_the_next_step(engine, spy):
    a, b = RequestHandle(), RequestHandle()
    sources = engine.encode_sources([LONG, "forty-two"])

    def gone(n: int) -> None:
        if n == 3:
            a.cancel(CLIENT_GONE)
            b.cancel(CLIENT_GONE)

    stepper = spy(engine, gone)
    with pytest.raises(RequestCancelled, match="disconnected"):
        engine.translate(sources, beam=4, alpha=0.6, nbest=1, handles=[a, b])
    assert stepper.steps == 3  # no step after the one during which they left

    stepper = spy(engine)
    with pytest.raises(RequestCancelled):  # cancelled before it started: not even encoded
        engine.translate(sources, beam=4, alpha=0.6, nbest=1, handles=[a, b])
    assert stepper.starts == 0 and stepper.steps == 0


def test_generation_stops_at_the_step_after_a_cancel_or_the_deadline(checkpoint, spy):
    engine = ModelHost(load_model(checkpoint("decoder_only")))
    prompt = engine.encode_prompt("the cat")
    options: dict[str, Any] = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0}
    handle = RequestHandle()
    stepper = spy(engine, lambda n: n == 5 and handle.cancel(CLIENT_GONE))
    with pytest.raises(RequestCancelled):
        engine.generate(prompt, max_new_tokens=1000, **options, handle=handle)
    assert stepper.steps == 5

    alone = engine.generate(prompt, max_new_tokens=30, **options)
    assert engine.generate(prompt, max_new_tokens=30, **options, handle=RequestHandle()) == alone

    late = RequestHandle(timeout=0.0)  # already past its deadline at the first step
    with pytest.raises(RequestCancelled, match="time budget") as raised:
        engine.generate(prompt, max_new_tokens=1000, **options, handle=late)
    assert raised.value.status == 503


def test_owners_are_matched_by_tokens_whatever_the_row_order():
    h1, h2, h3 = RequestHandle(), RequestHandle(), RequestHandle()
    owners = Owners([[5, 6, 2], [7, 2], [7, 2], [9, 2]], [h1, h2, h3, h1])
    pad = 0
    src = torch.tensor([[9, 2, 0], [7, 2, 0], [5, 6, 2], [4, 2, 0]])
    groups = owners.groups(src, pad)
    assert groups[0] == (h1,) and groups[2] == (h1,)
    assert set(groups[1]) == {h2, h3}  # the same sentence from two requests: shared
    assert set(groups[3]) == {h1, h2, h3}  # a row no request sent: everyone's (never expected)
    assert Owners.single(h2).groups(src, pad) == [(h2,)] * 4


class _Rows:
    """A fake search state: which original row each row holds."""

    def __init__(self, rows: torch.Tensor) -> None:
        self.rows = rows

    def reorder(self, indices: torch.Tensor, *, group_size: int | None = None) -> _Rows:
        return _Rows(self.rows[indices])


def test_reorder_carries_each_rows_owner_along():
    h1, h2 = RequestHandle(), RequestHandle()
    state = _OwnedState(_Rows(torch.arange(2)), torch.tensor([0, 1]), ((h1,), (h2,)))
    state = state.reorder(torch.tensor([0, 0, 1, 1]), group_size=2)  # beam 2
    state = state.reorder(torch.tensor([1, 0, 3, 3]), group_size=2)
    assert state.owner.tolist() == [0, 0, 1, 1] and state.inner.rows.tolist() == [0, 0, 1, 1]


class _Flat:
    """A stepper whose logits prefer token 3 everywhere (EOS is 2)."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def start(self, src_ids: torch.Tensor, *, max_steps: int | None = None) -> _Rows:
        return _Rows(torch.arange(src_ids.size(0)))

    def step(self, tokens: torch.Tensor, state: _Rows) -> tuple[torch.Tensor, _Rows]:
        logits = torch.zeros(tokens.size(0), 5)
        logits[:, 3] = 1.0
        return logits, state


def test_rows_of_a_cancelled_request_get_eos_and_the_others_are_untouched():
    h1, h2 = RequestHandle(), RequestHandle()
    stepper = CancellableStepper(_Flat(), Owners([[4, 2], [5, 2]], [h1, h2]))
    state = stepper.start(torch.tensor([[4, 2], [5, 2]]))
    logits, state = stepper.step(torch.tensor([1, 1]), state)
    assert logits.argmax(-1).tolist() == [3, 3]
    h2.cancel(CLIENT_GONE)
    logits, state = stepper.step(torch.tensor([3, 3]), state)
    assert logits[0].tolist() == [0.0, 0.0, 0.0, 1.0, 0.0]
    assert logits[1].argmax().item() == 2 and logits[1].max().item() - logits[1, 3].item() > 1e3
