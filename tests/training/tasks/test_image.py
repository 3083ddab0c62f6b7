"""The image_classification task: digits and folders, batches and epochs, resume, the keys
it reads and refuses, grad accumulation, and MoE encoders."""

from __future__ import annotations

import pytest
import torch

from attnkit.errors import ConfigError, DataError
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import ImageClassificationTask, task_from_run

pytest.importorskip("sklearn")

TINY = {"d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 1, "dropout": 0.0}


def _run(data=None, model=None, **train) -> RunConfig:
    train = {
        "max_steps": 4,
        "max_tokens": 5 * 64,
        "schedule": "constant",
        "lr": 3e-3,
        "warmup_steps": 0,
        "log_every": 1,
        "eval_every": 100,
        "save_every": 0,
        **train,
    }
    return RunConfig.from_dict({"task": "image_classification",
                                "data": {"images": "digits", **(data or {})},
                                "model": {**TINY, **(model or {})}, "train": train})  # fmt: skip


def _trainer(tmp_path, **kw) -> Trainer:
    run = _run(**kw)
    return Trainer(run, task_from_run(run), tmp_path, progress=False)


def test_digits_task_reads_the_fixed_split_and_puts_the_classes_in_the_config():
    task = task_from_run(_run())
    assert isinstance(task, ImageClassificationTask)
    assert (len(task.train), len(task.valid)) == (1438, 359)
    c = task.model_config
    assert (c.family, c.num_classes, c.class_names) == ("vit", 10, tuple("0123456789"))
    assert (c.image_size, c.patch_size, c.seq_len) == (8, 4, 5)  # the digits preset
    assert task.batch_size == 64  # max_tokens 320 / 5 tokens per image
    assert "1438 training and 359 held-out images" in task.describe()
    assert task.tokenizer is None


def test_an_epoch_visits_every_image_once_then_reshuffles():
    run = _run(max_tokens=5 * 500)  # 500 images a batch: 3 batches (the last 438)
    task = task_from_run(run)
    seen = []
    for _ in range(3):
        (images, labels), real = task.next_batch()
        assert real
        seen.append(images)
    first = torch.cat(seen)
    assert first.size(0) == 1438 and task.batches_per_epoch() == 3
    key = [tuple(row.flatten().tolist()) for row in first]
    assert sorted(key) == sorted(tuple(r.flatten().tolist()) for r in task.train.images)
    (images, _), _ = task.next_batch()  # epoch 1: another order
    assert task.epoch == 1 and not torch.equal(images, first[:500])
    assert task.progress() == {"epoch": pytest.approx(1 + 1 / 3, abs=1e-3)}


def test_shifts_are_off_by_default_and_move_images_when_asked():
    plain = task_from_run(_run())
    (images, _), _ = plain.next_batch()
    originals = {tuple(r.flatten().tolist()) for r in plain.train.images}
    assert all(tuple(r.flatten().tolist()) in originals for r in images)
    shifted = task_from_run(_run(data={"max_shift": 1}))
    (moved, _), _ = shifted.next_batch()
    assert torch.equal(shifted.order, plain.order)  # the same images, moved
    assert not torch.equal(moved, images)
    for b in range(8):  # each image is one of the 9 one-pixel shifts of its original
        padded = torch.nn.functional.pad(images[b, 0], (1, 1, 1, 1))
        crops = [padded[dy : dy + 8, dx : dx + 8] for dy in range(3) for dx in range(3)]
        assert any(torch.equal(moved[b, 0], c) for c in crops)


def test_state_round_trip_continues_the_same_stream_across_an_epoch_boundary():
    run = _run(data={"max_shift": 1}, max_tokens=5 * 600)  # 3 batches an epoch
    a, b = task_from_run(run), task_from_run(run)
    for steps in (1, 3):  # mid-epoch, and at the epoch's end
        for _ in range(steps):
            a.next_batch()
        state = a.state_dict()
        b.load_state_dict(state)
        for _ in range(4):
            (xa, ya), _ = a.next_batch()
            (xb, yb), _ = b.next_batch()
            assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_the_task_trains_and_evaluates_accuracy(tmp_path):
    trainer = _trainer(tmp_path, max_steps=40, eval_every=40, lr=1e-2)
    summary = trainer.fit()
    valid = summary["valid"]
    assert set(valid) == {"loss", "nll", "accuracy"} and valid["accuracy"] > 0.5
    assert not (tmp_path / "checkpoints" / "step_00000040" / "tokenizer.json").exists()


def test_grad_accum_of_two_half_batches_equals_one_full_batch(tmp_path):
    full = _trainer(tmp_path / "full", max_tokens=5 * 64, grad_accum=1)
    half = _trainer(tmp_path / "half", max_tokens=5 * 32, grad_accum=2)
    for trainer in (full, half):
        trainer.model.double()
        trainer.task.train.images = trainer.task.train.images.double()
    for _ in range(3):
        a, b = full.train_step(), half.train_step()
        assert a["tokens"] == b["tokens"] == 64
        assert abs(a["loss"] - b["loss"]) < 1e-9
        assert a["metrics"]["accuracy"] == pytest.approx(b["metrics"]["accuracy"])
    for (name, p), q in zip(full.model.state_dict().items(), half.model.state_dict().values()):
        assert (p - q).abs().max() <= 1e-6, name


def test_an_moe_vit_adds_the_aux_losses_and_logs_utilisation(tmp_path):
    moe = {"ffn": "moe", "num_experts": 4, "moe_top_k": 1}
    trainer = _trainer(tmp_path, model=moe, label_smoothing=0.0)
    stats = trainer.train_step()
    assert stats["loss"] > stats["nll"]
    shares = [stats["metrics"][f"expert_util_{i}"] for i in range(4)]
    assert sum(shares) == pytest.approx(1.0)


def test_keys_of_the_image_task_are_refused_elsewhere_and_the_other_way_round():
    with pytest.raises(ConfigError, match=r"^data.images: applies to task image_classification"):
        RunConfig.from_dict({"task": "lm", "data": {"images": "digits"}})
    with pytest.raises(ConfigError, match=r"^data.max_shift: applies to task image_classif"):
        RunConfig.from_dict({"task": "translation", "data": {"max_shift": 1}})
    with pytest.raises(ConfigError, match=r"^data.text: applies to task lm or mlm"):
        RunConfig.from_dict({"task": "image_classification", "data": {"text": "a.txt"}})
    with pytest.raises(ConfigError, match=r"^train.eval_blocks: applies to task lm or mlm"):
        RunConfig.from_dict({"task": "image_classification", "train": {"eval_blocks": 3}})
    run = _run(label_smoothing=0.2)  # label smoothing applies here too
    assert run.train.label_smoothing == 0.2
    assert RunConfig.from_dict(run.to_dict()) == run  # run.json reloads as a config


def test_model_and_data_mismatches_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"^model.image_size: the digits are 8x8"):
        task_from_run(_run(model={"image_size": 16}))
    with pytest.raises(ConfigError, match=r"^model.num_classes: 12, but the data has 10"):
        task_from_run(_run(model={"num_classes": 12}))
    with pytest.raises(ConfigError, match=r"^model.family: task image_classification trains"):
        task_from_run(_run(model={"family": "decoder_only"}))
    with pytest.raises(ConfigError, match=r"^data.images: set data.images|^data.images: the"):
        run = RunConfig.from_dict({"task": "image_classification"})
        task_from_run(run)
    with pytest.raises(ConfigError, match=r"^data.images: .* is not a folder"):
        task_from_run(_run(data={"images": str(tmp_path / "nowhere")}))


def _folder(root, rows: str, n: int = 12):
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (16, 12), color=(20 * i, 0, 255 - 20 * i)).save(root / f"im{i}.png")
    (root / "labels.csv").write_text(rows, encoding="utf-8")
    return root


def test_a_folder_is_converted_resized_and_split_by_class(tmp_path):
    rows = "filename,label\n" + "".join(f"im{i}.png,{'cat' if i % 2 else 'dog'}\n"
                                        for i in range(12))  # fmt: skip
    _folder(tmp_path / "pics", rows)
    run = _run(data={"dir": str(tmp_path), "images": "pics", "valid_fraction": 0.25},
               model={"image_size": 8, "channels": 3, "patch_size": 4})  # fmt: skip
    task = task_from_run(run)
    assert task.model_config.class_names == ("cat", "dog")
    assert task.train.images.shape == (8, 3, 8, 8) and len(task.valid) == 4
    assert sorted(task.valid.labels.tolist()) == [0, 0, 1, 1]  # stratified


def test_a_bad_labels_line_is_one_error_naming_file_and_line(tmp_path):
    _folder(tmp_path / "pics", "filename,label\nim0.png,cat\nim1.png\n")
    run = _run(data={"dir": str(tmp_path), "images": "pics"}, model={"channels": 3})
    with pytest.raises(DataError, match=r"labels.csv:3: expected 'filename,label'"):
        task_from_run(run)
    _folder(tmp_path / "pics2", "im0.png,cat\nmissing.png,dog\n")
    run = _run(data={"dir": str(tmp_path), "images": "pics2"}, model={"channels": 3})
    with pytest.raises(DataError, match=r"labels.csv:2: image 'missing.png' not found"):
        task_from_run(run)
