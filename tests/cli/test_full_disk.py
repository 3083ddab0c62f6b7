"""A full disk (mocked ENOSPC) during train, export, average: one line, nothing half-written."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import safetensors.torch
from cli_helpers import tiny_checkpoint, tiny_run_config
from safetensors import SafetensorError

from attnkit.cli.main import main


def _full(*args, **kwargs):
    raise SafetensorError(
        'Error while serializing: I/O error: No space left on device (os error 28) at path "x"'
    )


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _hidden(directory: Path) -> list[str]:
    return [str(p) for p in directory.rglob(".*") if ".tmp-" in p.name or ".old-" in p.name]


def test_train_on_a_full_disk_stops_with_one_line_and_keeps_its_checkpoints(
    tmp_path, capsys, monkeypatch
):
    config = tiny_run_config(tmp_path)
    run = tmp_path / "run"
    argv = ["train", "--config", str(config), "--out", str(run), "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    kept = sorted(p.name for p in (run / "checkpoints").iterdir())
    weights = (run / "checkpoints" / kept[-1] / "model.safetensors").read_bytes()
    monkeypatch.setattr(safetensors.torch, "save_file", _full)
    code = main([*argv, "--resume", "--set", "train.max_steps=6"])
    err = _one_line(capsys)
    assert code == 1 and "no space left on device" in err and "step_00000006" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == kept
    assert (run / "checkpoints" / kept[-1] / "model.safetensors").read_bytes() == weights
    assert _hidden(run) == []


def test_export_on_a_full_disk_is_one_line_and_leaves_the_old_export(tmp_path, capsys, monkeypatch):
    pytest.importorskip("transformers")
    from attnkit.interop.hf import export as hf_export

    checkpoint = tiny_checkpoint(tmp_path / "ck")
    out = tmp_path / "export"
    out.mkdir()
    (out / "config.json").write_text("{}")

    def write_half(directory: Path, *args, **kwargs) -> None:
        (directory / "config.json").write_text('{"half": ')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory / "model.bin"))

    monkeypatch.setattr(hf_export, "write_hf_directory", write_half)
    argv = ["export", "--checkpoint", str(checkpoint), "--to", "hf", "--out", str(out)]
    assert main([*argv, "--overwrite"]) == 1
    err = _one_line(capsys)
    assert f"--out {out}: cannot write (no space left on device)" in err
    assert (out / "config.json").read_text() == "{}" and _hidden(tmp_path) == []
