"""Checkpoints: round trips, bit-exact resume, tied weights, averaging, refusals, atomicity."""

from __future__ import annotations

import pickle
import random
import struct

import numpy as np
import pytest
import torch
from torch import nn

from attnkit import checkpoints as ckpt
from attnkit.errors import CheckpointError
from attnkit.training import rng
from attnkit.training.optim import build_optimizer
from attnkit.training.schedules import build_scheduler

CONFIG = {"d_model": 8, "vocab": 12, "name": "tiny"}


class TiedLM(nn.Module):
    """Embedding tied to the output projection, dropout so RNG state matters."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(12, 8)
        self.ffn = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.drop = nn.Dropout(0.3)
        self.out = nn.Linear(8, 12, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.drop(torch.relu(self.ffn(self.embed(ids))))))


def _train(model, opt, sched, steps: int) -> None:
    for _ in range(steps):
        ids = torch.randint(0, 12, (4, 5))  # drawn from the RNG that is checkpointed
        loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step()


def _fresh():
    model = TiedLM()
    opt = build_optimizer(model, lr=1e-2, weight_decay=0.1)
    sched = build_scheduler(opt, "noam", d_model=8, warmup_steps=4)
    return model, opt, sched


def _save(directory, model, **kw):
    return ckpt.save_checkpoint(directory, model_state=model.state_dict(), config=CONFIG, **kw)


def test_resume_is_bit_exact(tmp_path):
    model, opt, sched = _fresh()
    _train(model, opt, sched, 3)
    random.random(), np.random.rand()  # advance the other RNGs too
    trainer_state = {"step": 3, "scheduler": sched.state_dict(), "rng": rng.capture_rng_state()}
    _save(
        tmp_path / "c",
        model,
        tokenizer_json='{"vocab": ["a"]}',
        trainer_state=trainer_state,
        optimizer_state=opt.state_dict(),
    )
    _train(model, opt, sched, 3)
    after = (random.random(), np.random.rand())

    loaded = ckpt.load_checkpoint(tmp_path / "c")
    assert loaded.config == CONFIG and loaded.tokenizer_json == '{"vocab": ["a"]}'
    assert loaded.trainer_state["rng"]["python"] == trainer_state["rng"]["python"]  # tuples back
    model2, opt2, sched2 = _fresh()
    model2.load_state_dict(loaded.model_state)
    opt2.load_state_dict(loaded.optimizer_state)
    sched2.load_state_dict(loaded.trainer_state["scheduler"])
    rng.restore_rng_state(loaded.trainer_state["rng"])
    _train(model2, opt2, sched2, 3)

    assert (random.random(), np.random.rand()) == after
    assert model2.out.weight is model2.embed.weight
    for (name, p), p2 in zip(model.state_dict().items(), model2.state_dict().values()):
        assert torch.equal(p, p2), name
    assert opt2.param_groups[0]["betas"] == (0.9, 0.98)
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]


def test_tied_weights_stored_once_and_loaded_tied(tmp_path):
    model = TiedLM()
    _save(tmp_path / "c", model)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "c" / "model.safetensors"), "pt") as f:
        stored = set(f.keys())
    assert len(stored) == len(model.state_dict()) - 1  # one of the tied pair
    state = ckpt.load_checkpoint(tmp_path / "c").model_state
    assert state["out.weight"] is state["embed.weight"]
    fresh = TiedLM()
    fresh.load_state_dict(state, strict=True)
    assert torch.equal(fresh.out.weight, model.embed.weight)


def test_views_sharing_storage_are_saved(tmp_path):
    base = torch.arange(12.0)
    ckpt.save_tensors(
        tmp_path / "t.safetensors", {"a": base[:6], "b": base[6:], "t": base.view(3, 4).T}
    )
    got = ckpt.load_tensors(tmp_path / "t.safetensors")
    assert torch.equal(got["b"], torch.arange(6.0, 12.0))
    assert torch.equal(got["t"], base.view(3, 4).T)


def test_average_of_two_checkpoints_is_the_mean(tmp_path):
    a, b = TiedLM(), TiedLM()
    _save(tmp_path / "a", a)
    _save(tmp_path / "b", b)
    avg = ckpt.average_checkpoints([tmp_path / "a", tmp_path / "b"])
    for key, t in a.state_dict().items():
        torch.testing.assert_close(avg[key], (t + b.state_dict()[key]) / 2, rtol=0, atol=1e-7)
    assert avg["out.weight"] is avg["embed.weight"]


def test_average_rejects_a_different_model(tmp_path):
    _save(tmp_path / "a", TiedLM())
    ckpt.save_checkpoint(tmp_path / "b", model_state={"x": torch.zeros(2)}, config=CONFIG)
    with pytest.raises(CheckpointError, match=r"b: different parameters"):
        ckpt.average_checkpoints([tmp_path / "a", tmp_path / "b"])


def test_latest_checkpoint_picks_the_highest_step(tmp_path):
    assert ckpt.latest_checkpoint(tmp_path) is None
    assert ckpt.checkpoint_dir(tmp_path, 1000).name == "step_00001000"
    for step in (5, 100_000_000, 40):
        _save(ckpt.checkpoint_dir(tmp_path, step), TiedLM())
    (tmp_path / "checkpoints" / ".step_999999999.tmp-x").mkdir()  # a stale temp dir
    assert ckpt.latest_checkpoint(tmp_path) == ckpt.checkpoint_dir(tmp_path, 100_000_000)
    ckpt.remove_checkpoint(ckpt.checkpoint_dir(tmp_path, 100_000_000))
    assert ckpt.latest_checkpoint(tmp_path) == ckpt.checkpoint_dir(tmp_path, 40)


# -- refusals: one CheckpointError naming the file -------------------------------------


def test_missing_directory_and_config(tmp_path):
    with pytest.raises(CheckpointError, match="nope: checkpoint directory not found"):
        ckpt.load_checkpoint(tmp_path / "nope")
    _save(tmp_path / "c", TiedLM())
    (tmp_path / "c" / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: file not found"):
        ckpt.load_checkpoint(tmp_path / "c")


def test_invalid_json(tmp_path):
    _save(tmp_path / "c", TiedLM())
    (tmp_path / "c" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config\.json: invalid JSON"):
        ckpt.load_checkpoint(tmp_path / "c")


def test_truncated_safetensors(tmp_path):
    _save(tmp_path / "c", TiedLM())
    path = tmp_path / "c" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: file is .* bytes"):
        ckpt.load_checkpoint(tmp_path / "c")
    path.write_bytes(b"\x01\x02")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: truncated"):
        ckpt.load_checkpoint(tmp_path / "c")


def test_oversized_header_is_refused(tmp_path):
    _save(tmp_path / "c", TiedLM())
    path = tmp_path / "c" / "model.safetensors"
    header_len = ckpt.MAX_HEADER_BYTES + 8
    with path.open("wb") as f:
        f.write(header_len.to_bytes(8, "little") + b"{")
        f.truncate(8 + header_len)  # sparse file: size consistent, header huge
    with pytest.raises(CheckpointError, match="exceeds"):
        ckpt.load_checkpoint(tmp_path / "c")


def test_torch_save_file_is_refused(tmp_path):
    _save(tmp_path / "c", TiedLM())
    torch.save(TiedLM().state_dict(), tmp_path / "c" / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: .*refusing to unpickle"):
        ckpt.load_checkpoint(tmp_path / "c")


class _Payload:
    """Unpickling this would create a file: the attack a checkpoint must not allow."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_malicious_pickle_is_never_unpickled(tmp_path, protocol):
    _save(tmp_path / "c", TiedLM())
    victim = tmp_path / "pwned.txt"
    data = pickle.dumps(_Payload(str(victim)), protocol=protocol)
    (tmp_path / "c" / "model.safetensors").write_bytes(data)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: is a Python pickle"):
        ckpt.load_checkpoint(tmp_path / "c")
    assert not victim.exists()


@pytest.mark.parametrize("header_len", [0x280, 0x380, 0x480, 0x580])
def test_header_length_that_starts_like_a_pickle_is_read(tmp_path, header_len):
    # A header of 0x280 bytes makes the file start b"\x80\x02", a pickle's first bytes.
    from attnkit.checkpoints.safe_files import load_tensors

    header = b'{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'.ljust(header_len)
    path = tmp_path / "model.safetensors"
    path.write_bytes(header_len.to_bytes(8, "little") + header + struct.pack("<f", 1.5))
    assert load_tensors(path)["x"].tolist() == [1.5]


# -- atomic writes --------------------------------------------------------------------


def _fail_on_second_json(monkeypatch):
    from attnkit.checkpoints import safe_files

    real = safe_files.write_json
    calls = []

    def flaky(path, obj):
        calls.append(path)
        if len(calls) == 2:
            raise RuntimeError("simulated crash mid-write")
        real(path, obj)

    monkeypatch.setattr(safe_files, "write_json", flaky)


def test_failed_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    old = TiedLM()
    target = tmp_path / "checkpoints" / "step_00000010"
    _save(target, old, trainer_state={"step": 10})
    _fail_on_second_json(monkeypatch)
    with pytest.raises(RuntimeError, match="simulated"):
        _save(target, TiedLM(), trainer_state={"step": 11})
    loaded = ckpt.load_checkpoint(target)
    assert loaded.trainer_state == {"step": 10}
    assert torch.equal(loaded.model_state["embed.weight"], old.embed.weight)
    assert [p.name for p in target.parent.iterdir()] == ["step_00000010"]


def test_failed_first_save_leaves_nothing(tmp_path, monkeypatch):
    _fail_on_second_json(monkeypatch)
    with pytest.raises(RuntimeError):
        _save(tmp_path / "c", TiedLM(), trainer_state={"step": 1})
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_and_cleans_up(tmp_path):
    _save(tmp_path / "c", TiedLM(), trainer_state={"step": 1})
    _save(tmp_path / "c", TiedLM(), trainer_state={"step": 2})
    assert ckpt.load_checkpoint(tmp_path / "c").trainer_state == {"step": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["c"]
