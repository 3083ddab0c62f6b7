"""``attnkit train`` with ``task: image_classification``, then ``evaluate --images`` and
``attention --image``, through the real CLI; a killed run resumes bit-exact; bad folders
and labels files are one line naming file:line."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit import checkpoints as ckpt
from attnkit.cli import train as train_command
from attnkit.cli.main import build_parser, main

pytest.importorskip("sklearn")

CONFIG = """
task: image_classification
data: {{images: digits, max_shift: 1}}
model: {{family: vit, preset: digits, d_model: 16, num_heads: 2, d_ff: 32, num_layers: 1,
        dropout: 0.1}}
train: {{max_steps: {steps}, max_tokens: {max_tokens}, schedule: cosine, lr: 1.0e-2,
        warmup_steps: 2, weight_decay: 0.05, label_smoothing: 0.1, log_every: 1,
        eval_every: {steps}, save_every: {save_every}, keep_last: 0, threads: 1}}
"""


def _config(root, steps=8, max_tokens=5 * 720, save_every=3):
    path = root / "vit.yaml"
    text = CONFIG.format(steps=steps, max_tokens=max_tokens, save_every=save_every)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny ViT trained for 30 steps of 64 digits (about 1.3 epochs)."""
    root = tmp_path_factory.mktemp("vit")
    config = _config(root, steps=30, max_tokens=5 * 64, save_every=30)
    out = root / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    return out


def test_training_logs_accuracy_and_saves_the_class_names(trained):
    records = [json.loads(x) for x in (trained / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["split"] == "valid"]
    assert [r["step"] for r in valid] == [30] and valid[0]["accuracy"] > 0.2  # chance: 0.1
    assert all("accuracy" in r and "epoch" in r for r in records if r["split"] == "train")
    config = json.loads((ckpt.latest_checkpoint(trained) / "config.json").read_text())
    assert config["family"] == "vit" and config["class_names"] == list("0123456789")
    assert json.loads((trained / "run.json").read_text())["task"] == "image_classification"


def test_evaluate_prints_the_accuracy_the_run_logged(trained, capsys):
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(trained), "--images", "digits", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    records = [json.loads(x) for x in (trained / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if r["split"] == "valid"][-1]
    assert result["images"] == 359 and result["accuracy"] == pytest.approx(logged["accuracy"])
    assert result["loss"] == pytest.approx(logged["nll"])
    assert set(result["per_class_accuracy"]) == set("0123456789")
    assert main(["evaluate", "--checkpoint", str(trained), "--images", "digits"]) == 0
    assert capsys.readouterr().out.startswith("accuracy ")


def _digit_folder(root, n=12, bad_label_line=None):
    from PIL import Image

    from attnkit.data.images import load_digits_split

    held_out = load_digits_split()[1]
    root.mkdir()
    lines = ["filename,label"]
    for i in range(n):
        pixels = (held_out.images[i, 0] * 255).round().to(torch.uint8).numpy()
        Image.fromarray(pixels, mode="L").save(root / f"d{i}.png")
        lines.append(f"d{i}.png,{int(held_out.labels[i])}")
    if bad_label_line is not None:
        lines[bad_label_line - 1] = "d0.png,seven"
    (root / "labels.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_evaluate_and_attention_read_a_folder_and_a_file(trained, tmp_path, capsys):
    folder = _digit_folder(tmp_path / "pngs")
    capsys.readouterr()
    argv = ["evaluate", "--checkpoint", str(trained), "--images", str(folder), "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["images"] == 12
    out = tmp_path / "file_map.png"
    argv = ["attention", "--checkpoint", str(trained), "--image", str(folder / "d3.png"),
            "--out", str(out), "--head", "1"]  # fmt: skip
    assert main(argv) == 0 and out.stat().st_size > 2000


def test_attention_draws_the_class_token_map_of_a_held_out_digit(trained, tmp_path, capsys):
    out = tmp_path / "map.png"
    argv = ["attention", "--checkpoint", str(trained), "--image", "digits:5", "--out", str(out)]
    assert main(argv) == 0
    assert "held-out digit 5: predicted" in capsys.readouterr().out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--image", "digits:359"], "--image digits:359: expected digits:INDEX with INDEX in"),
        (["--image", "nowhere.png"], "nowhere.png: image not found"),
        (["--text", "hello"], "--image: an image classifier's map is drawn for an image"),
        (["--image", "digits:0", "--layer", "3"], "--layer must be in [-1, 0], got 3"),
    ],
)
def test_attention_mistakes_are_one_line(trained, tmp_path, capsys, argv, message):
    base = ["attention", "--checkpoint", str(trained), "--out", str(tmp_path / "m.png")]
    assert main(base + argv) in (1, 2)
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_bad_labels_file_is_one_line_naming_file_and_line(trained, tmp_path, capsys):
    folder = _digit_folder(tmp_path / "bad", n=4, bad_label_line=3)
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(trained), "--images", str(folder)]) == 1
    err = capsys.readouterr().err.strip()
    assert f"{folder / 'labels.csv'}:3: label 'seven' is not one of the classes" in err
    assert len(err.splitlines()) == 1
    # Training on a folder whose labels file names a missing image: file:line, nothing written.
    (folder / "labels.csv").write_text("filename,label\nd0.png,1\ngone.png,2\n", encoding="utf-8")
    config = _config(tmp_path)
    out = tmp_path / "never"
    argv = ["train", "--config", str(config), "--out", str(out), "--set", f"data.images={folder}",
            "--set", "data.valid_fraction=0"]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert f"{folder / 'labels.csv'}:3: image 'gone.png' not found" in err
    assert len(err.splitlines()) == 1 and not out.exists()


class _Crash(Exception):
    pass


def _train(config, out, *extra, crash_at=None):
    def crash(event: str, step: int) -> None:
        if event == "train_step" and step == crash_at:
            raise _Crash(step)

    args = build_parser().parse_args(
        ["train", "--config", str(config), "--out", str(out), "--no-progress", *extra]
    )
    return train_command.run(args, callbacks=[crash])


def test_a_crashed_run_resumes_bit_exact_mid_epoch_and_at_an_epoch_end(tmp_path):
    # 720 images a batch: 2 batches an epoch. Checkpoints at step 3 (mid-epoch) and
    # 6 (an epoch's end); shifts and dropout make every RNG matter.
    config = _config(tmp_path, steps=8, max_tokens=5 * 720, save_every=3)
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert _train(config, whole) == 0
    with pytest.raises(_Crash):
        _train(config, broken, crash_at=5)  # resumes from step 3
    with pytest.raises(_Crash):
        _train(config, broken, "--resume", crash_at=7)  # resumes from step 6
    assert _train(config, broken, "--resume") == 0
    a = ckpt.load_checkpoint(whole / "checkpoints" / "step_00000008").model_state
    b = ckpt.load_checkpoint(broken / "checkpoints" / "step_00000008").model_state
    for key in a:
        assert torch.equal(a[key], b[key]), key

    def train_log(run):
        lines = (run / "metrics.jsonl").read_text().splitlines()
        return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["split"] == "train"]

    assert train_log(whole) == train_log(broken)
