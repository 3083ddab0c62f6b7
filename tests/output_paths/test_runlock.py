"""The run-directory lock in one process: exclusive, named by PID, never stale."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attnkit.output_paths import RunLock, RunLockedError, refuse_if_locked
from attnkit.output_paths.runlock import LOCK_FILE


def test_a_second_holder_is_refused_with_the_pid_until_the_first_releases(tmp_path):
    with RunLock(tmp_path) as first:
        assert first.held
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with pytest.raises(RunLockedError) as e:
            RunLock(tmp_path, option="--out").acquire()
        assert f"--out {tmp_path}: in use by another attnkit run (PID {os.getpid()}" in str(e.value)
        with pytest.raises(RunLockedError):
            refuse_if_locked(tmp_path)
    refuse_if_locked(tmp_path)  # released: nothing raised
    with RunLock(tmp_path):
        pass


def test_refuse_if_locked_creates_nothing(tmp_path):
    refuse_if_locked(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    """SIGKILL drops the flock; the leftover file (and its PID) does not block the next run."""
    code = (
        "import sys, time; from attnkit.output_paths import RunLock; "
        f"RunLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(RunLockedError, match=f"PID {holder.pid}"):
            RunLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / LOCK_FILE).read_text() == f"{holder.pid}\n"
    with RunLock(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
