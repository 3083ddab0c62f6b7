"""The per-machine kernel choices' cache: what it keeps, and when it keeps nothing."""

from __future__ import annotations

import json

import pytest

from attnkit.kernels import machine_choice
from attnkit.kernels.machine_choice import ChoiceCache

# The module's own function: tests/conftest.py's autouse fixture replaces the attribute.
REAL_MACHINE_BUSY = machine_choice.machine_busy


def test_a_choice_is_kept_on_a_quiet_machine(tmp_path):
    cache = ChoiceCache("choice.json", ("a", "b"), tmp_path)
    cache.put("key", "b")
    assert cache.get("key") == "b"
    assert json.loads((tmp_path / "choice.json").read_text()) == {"key": "b"}


def test_a_choice_timed_on_a_busy_machine_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(machine_choice, "machine_busy", lambda: True)
    cache = ChoiceCache("choice.json", ("a", "b"), tmp_path)
    cache.put("key", "a")
    assert cache.get("key") is None
    assert not (tmp_path / "choice.json").exists()


def test_the_load_when_a_timing_began_decides_over_the_load_after(tmp_path, monkeypatch):
    monkeypatch.setattr(machine_choice, "machine_busy", lambda: True)  # the timing's own load
    cache = ChoiceCache("choice.json", ("a", "b"), tmp_path)
    cache.put("key", "a", busy=False)
    assert cache.get("key") == "a"
    cache.put("other", "b", busy=True)
    assert cache.get("other") is None


@pytest.mark.parametrize(("load", "cpus", "busy"), [(0.5, 2, False), (2.0, 2, False),
                                                    (2.5, 2, True), (9.0, 8, True)])  # fmt: skip
def test_busy_means_more_runnable_tasks_than_cpus(monkeypatch, load, cpus, busy):
    monkeypatch.setattr(machine_choice.os, "getloadavg", lambda: (load, 0.0, 0.0))
    monkeypatch.setattr(machine_choice.os, "cpu_count", lambda: cpus)
    assert REAL_MACHINE_BUSY() is busy
