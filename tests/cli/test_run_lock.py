"""Two processes on one run directory: the second `attnkit train` is refused, naming the first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import tiny_run_config

from attnkit.output_paths import RunLock, RunLockedError, refuse_if_locked
from attnkit.output_paths.runlock import LOCK_FILE

REPO = Path(__file__).parents[2]


def _cli(*argv: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.Popen([sys.executable, "-m", "attnkit", *argv], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.fixture
def config(tmp_path) -> Path:
    return tiny_run_config(tmp_path, max_steps=100000, save_every=5)


def _files(run: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_a_second_train_is_refused_at_once_and_changes_nothing(config, tmp_path):
    """--resume and --overwrite of a held run: exit 1, one line naming the holder's PID,
    the run (its checkpoints included) untouched."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step_00000005").mkdir(parents=True)
    (run / "checkpoints" / "step_00000005" / "model.safetensors").write_bytes(b"weights")
    (run / "metrics.jsonl").write_text('{"step": 5}\n')
    with RunLock(run):
        before = _files(run)
        for flag in ("--resume", "--overwrite"):
            second = _cli("train", "--config", str(config), "--out", str(run), flag, cwd=tmp_path)
            out, err = second.communicate(timeout=300)
            assert second.returncode == 1, err
            assert err.count("\n") == 1 and "Traceback" not in err and out == ""
            assert f"in use by another attnkit run (PID {os.getpid()}" in err
            assert _files(run) == before


def test_train_holds_the_lock_while_it_runs_and_a_kill_leaves_it_free(config, tmp_path):
    run = tmp_path / "run"
    first = _cli("train", "--config", str(config), "--out", str(run), "--no-progress",
                 "--set", "train.max_minutes=2", cwd=tmp_path)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not (run / "checkpoints").is_dir():  # it has opened the run and is training
            assert first.poll() is None, first.communicate()[1]
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.2)
        with pytest.raises(RunLockedError, match=f"PID {first.pid}"):
            refuse_if_locked(run)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    assert (run / LOCK_FILE).is_file()  # left behind, and harmless:
    with RunLock(run):
        pass


def test_a_refused_resume_leaves_the_lock_file_as_it_was(tmp_path, capsys):
    """The lock is taken at once, but its PID is written only once the command is
    accepted: a refused `train --resume` changes no byte and no mtime in the run."""
    import json

    from attnkit.cli.main import main

    config = tiny_run_config(tmp_path, max_steps=2, save_every=2)
    run = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(run), "--no-progress",
                 "--device", "cpu"]) == 0  # fmt: skip
    capsys.readouterr()
    lock = run / LOCK_FILE
    lock.write_text("4242\n")  # an earlier holder's PID, long gone
    os.utime(lock, ns=(1_000_000_000, 1_000_000_000))
    state = run / "checkpoints" / "step_00000002" / "trainer_state.json"

    def snapshot() -> dict[str, tuple[bytes, int]]:
        return {str(p): (p.read_bytes(), p.stat().st_mtime_ns)
                for p in sorted(run.rglob("*")) if p.is_file()}  # fmt: skip

    refusals = [
        # refused before the run directory is opened (--init on a run that had none)
        (["--init", str(run)], "did not start from a checkpoint"),
        # refused while resuming, after the run directory is opened (a crafted step)
        ([], "step"),
    ]
    for extra, message in refusals:
        if not extra:
            data = json.loads(state.read_text())
            data["step"] = -3
            state.write_text(json.dumps(data))
            os.utime(state, ns=(2_000_000_000, 2_000_000_000))
        before = snapshot()
        code = main(["train", "--config", str(config), "--out", str(run), "--resume",
                     "--no-progress", "--device", "cpu", *extra])  # fmt: skip
        err = capsys.readouterr().err
        assert code in (1, 2) and err.count("\n") == 1 and message in err, err
        assert snapshot() == before
