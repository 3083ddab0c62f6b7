"""Request handles: the first reason wins, callbacks run once, the deadline cancels."""

from __future__ import annotations

import threading
import time

import pytest

from attnkit.serve.handles import (
    CLIENT_GONE,
    SHUTTING_DOWN,
    RequestCancelled,
    RequestHandle,
)


def test_the_first_reason_wins_and_callbacks_run_once():
    handle = RequestHandle()
    seen: list[str] = []
    handle.on_cancel(lambda reason: seen.append(reason.message))
    assert not handle.cancelled
    handle.check()  # not cancelled: nothing raised
    assert handle.cancel(CLIENT_GONE) is True
    assert handle.cancel(SHUTTING_DOWN) is False
    assert handle.cancelled and handle.reason == CLIENT_GONE
    assert seen == [CLIENT_GONE.message]
    late: list[int] = []
    handle.on_cancel(lambda reason: late.append(reason.status))  # already cancelled: at once
    assert late == [499]
    with pytest.raises(RequestCancelled, match="disconnected") as raised:
        handle.check()
    assert raised.value.status == 499


def test_the_deadline_cancels_with_the_time_budget():
    handle = RequestHandle(timeout=0.05)
    assert not handle.cancelled
    remaining = handle.remaining()
    assert remaining is not None and 0 < remaining <= 0.05
    time.sleep(0.06)
    assert handle.cancelled
    error = handle.error()
    assert error.status == 503 and "time budget of 0.05 s" in str(error)
    assert "--request-timeout" in str(error)
    assert RequestHandle().remaining() is None


def test_cancel_from_many_threads_calls_back_once():
    handle = RequestHandle()
    calls: list[int] = []
    handle.on_cancel(lambda reason: calls.append(1))
    threads = [threading.Thread(target=handle.cancel, args=(CLIENT_GONE,)) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1]
