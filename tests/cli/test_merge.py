"""`attnkit merge`: a LoRA checkpoint folded into a full one that every command reads."""

from __future__ import annotations

import os
import stat

import pytest
import torch
from lora_helpers import lora_run

from attnkit.checkpoints import MODEL_FILE, load_model, load_tensors
from attnkit.checkpoints.adapters import ADAPTER_FILE
from attnkit.cli.main import main


def test_merged_checkpoint_equals_base_plus_adapters(tmp_path, capsys):
    base, lora, adapted = lora_run(tmp_path)
    out = tmp_path / "merged"
    assert main(["merge", "--checkpoint", str(lora), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"merged rank-4 adapters (q, v, o, ffn) of {lora} into ")
    assert not (out / ADAPTER_FILE).exists()
    assert set(load_tensors(out / MODEL_FILE)) == set(load_tensors(base / MODEL_FILE))
    ids = torch.randint(3, 30, (2, 11))
    with torch.no_grad():
        expected = adapted.eval()(ids).logits
        merged = load_model(out, "cpu").model(ids).logits
    assert (merged - expected).abs().max() < 1e-5
    base.rename(tmp_path / "gone")  # the merged checkpoint needs no base
    code = main(["generate", "--checkpoint", str(out), "--prompt", "the", "--precision", "int8w",
                 "--max-new-tokens", "5", "--device", "cpu"])  # fmt: skip
    assert code == 0


def test_merge_takes_a_moved_base_and_refuses_what_it_cannot_do(tmp_path, capsys):
    base, lora, _ = lora_run(tmp_path)
    moved = base.rename(tmp_path / "moved")
    assert main(["merge", "--checkpoint", str(lora), "--out", str(tmp_path / "a")]) == 1
    assert "its base checkpoint" in capsys.readouterr().err
    assert main(["merge", "--checkpoint", str(lora), "--base", str(moved),
                 "--out", str(tmp_path / "a")]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["merge", "--checkpoint", str(moved), "--out", str(tmp_path / "b")]) == 2
    assert "not a LoRA checkpoint (no adapter.json)" in capsys.readouterr().err
    assert main(["merge", "--checkpoint", str(lora), "--base", str(moved), "--out",
                 str(lora)]) == 2  # fmt: skip
    assert "is also an input of this command" in capsys.readouterr().err
    assert main(["merge", "--checkpoint", str(lora), "--base", str(moved), "--out",
                 str(tmp_path / "a")]) == 2  # fmt: skip
    assert "already exists and is not empty; pass --overwrite" in capsys.readouterr().err


def test_merge_out_follows_the_output_path_policy(tmp_path, capsys):
    """--out (even with --overwrite) never replaces a device, a file or a link loop with a
    directory: merge once swapped a character device for its checkpoint directory; nor
    writes inside the adapters' checkpoint or the base's."""
    base, lora, _ = lora_run(tmp_path)
    device = tmp_path / "device"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null (CI is root)
    file = tmp_path / "notes.txt"
    file.write_text("mine\n")
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    cases = [(device, "is a character device, not a directory"),
             (file, "is a regular file, not a directory"),
             (loop, "symbolic link that cannot be followed"),
             (lora.parent, "holds the input"),
             (lora / "merged", f"lies inside the input {lora}"),
             (base / "merged", f"lies inside the input {base}")]  # fmt: skip
    for out, message in cases:
        before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
        code = main(["merge", "--checkpoint", str(lora), "--out", str(out), "--overwrite"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, err
        after = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
        assert after == before  # nothing written, no .old-* left either
    assert stat.S_ISCHR(device.lstat().st_mode) and file.read_text() == "mine\n"


@pytest.mark.parametrize("command", ["generate", "evaluate"])
def test_commands_read_a_lora_checkpoint_directly(tmp_path, command):
    _, lora, _ = lora_run(tmp_path)
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox " * 20, encoding="utf-8")
    args = {"generate": ["--prompt", "the", "--max-new-tokens", "3"],
            "evaluate": ["--text", str(text), "--context", "16"]}[command]  # fmt: skip
    assert main([command, "--checkpoint", str(lora), "--device", "cpu", *args]) == 0


def test_merge_base_takes_a_run_directory_as_checkpoint_does(tmp_path, capsys):
    base, lora, _ = lora_run(tmp_path)
    run = tmp_path / "base_run"
    (run / "checkpoints").mkdir(parents=True)
    base.rename(run / "checkpoints" / "step_00000007")  # the base moved into a run
    out = tmp_path / "merged"
    assert main(["merge", "--checkpoint", str(lora), "--base", str(run), "--out", str(out)]) == 0
    assert "step_00000007" in capsys.readouterr().out
    assert main(["merge", "--checkpoint", str(lora), "--base", str(tmp_path / "nowhere"),
                 "--out", str(tmp_path / "m2")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--base " in err and "not found" in err


@pytest.mark.parametrize("command", ["merge", "average"])
def test_out_inside_another_runs_checkpoints_is_refused(tmp_path, capsys, command):
    """A checkpoint written into RUN/checkpoints/ would be taken for that run's own
    (its latest, resumed from, pruned): refused, and nothing is written."""
    base, lora, _ = lora_run(tmp_path)
    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    (other / "run.json").write_text("{}\n")
    for out in (other / "checkpoints" / "step_99999999", other / "checkpoints"):
        if command == "merge":
            argv = ["merge", "--checkpoint", str(lora), "--out", str(out), "--overwrite"]
        else:
            argv = [
                "average",
                "--checkpoints",
                str(base),
                str(base),
                "--out",
                str(out),
                "--overwrite",
            ]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert f"inside the run {other}'s checkpoints/, which that run owns" in err
        assert list((other / "checkpoints").iterdir()) == []
