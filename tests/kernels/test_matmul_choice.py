"""train.cpu_matmul: auto times oneDNN and MKL on the first batch and keeps the faster."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from attnkit.kernels import matmul_choice, onednn_linear

pytestmark = pytest.mark.skipif(not onednn_linear.available(), reason="torch without oneDNN")


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.ReLU(), nn.Linear(16, 4))


def kinds(model: nn.Module) -> set[type]:
    return {type(m) for m in model.modules() if isinstance(m, nn.Linear)}


def one_pass_of(model: nn.Module):
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
    return lambda: model(x).square().sum().backward()


@pytest.mark.parametrize("winner", ["onednn", "mkl"])
def test_measure_keeps_the_faster_and_leaves_no_trace(monkeypatch, winner):
    model = mlp().train()
    times = iter([2.0, 1.0] if winner == "onednn" else [1.0, 2.0])  # MKL's, then oneDNN's
    monkeypatch.setattr(matmul_choice, "best_time", lambda one_pass: (one_pass(), next(times))[1])
    rng = torch.get_rng_state()
    choice = matmul_choice.measure(model, one_pass_of(model))
    assert choice.backend == winner
    assert choice.speedup == pytest.approx(2.0 if winner == "onednn" else 0.5)
    expected = onednn_linear.OneDNNLinearModule if winner == "onednn" else nn.Linear
    assert kinds(model) == {expected}
    assert model.training  # its mode restored
    assert all(p.grad is None for p in model.parameters())  # the timed passes' gradients dropped
    assert torch.equal(torch.get_rng_state(), rng)  # and the generator untouched
    assert winner in choice.describe() and "measured in" in choice.describe()


def test_measure_for_real_on_a_small_model():
    model = mlp()
    choice = matmul_choice.measure(model, one_pass_of(model))
    assert choice.backend in ("onednn", "mkl") and choice.speedup > 0
    plain = choice.backend == "mkl"
    assert kinds(model) == {nn.Linear if plain else onednn_linear.OneDNNLinearModule}


def test_plain_linear_undoes_onednn_and_keeps_the_parameters():
    model = mlp()
    before = {name: p for name, p in model.named_parameters()}
    assert onednn_linear.use_onednn_linear(model) == 2
    assert onednn_linear.use_plain_linear(model) == 2
    assert kinds(model) == {nn.Linear}
    assert all(p is before[name] for name, p in model.named_parameters())  # the very tensors


def test_the_choice_is_kept_per_model_and_machine(tmp_path):
    model = mlp()
    assert matmul_choice.cached(model, tmp_path) is None
    matmul_choice.remember(model, "mkl", tmp_path)
    assert matmul_choice.cached(model, tmp_path) == "mkl"
    other = mlp()
    other[0].weight.requires_grad_(False)  # another model (here: what trains) is timed again
    assert matmul_choice.cached(other, tmp_path) is None
    (tmp_path / matmul_choice.CACHE_FILE).write_text("{not json")
    assert matmul_choice.cached(model, tmp_path) is None  # a broken cache is ignored
    matmul_choice.remember(model, "onednn", tmp_path)  # and rewritten
    assert json.loads((tmp_path / matmul_choice.CACHE_FILE).read_text()) == {
        matmul_choice.model_key(model): "onednn"
    }


def test_a_cache_that_cannot_be_written_is_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    matmul_choice.remember(mlp(), "mkl", blocker / "under-a-file")  # no exception


@pytest.mark.parametrize(
    ("setting", "cpu", "distributed", "timed", "layer"),
    [
        ("mkl", True, False, False, nn.Linear),
        ("onednn", True, False, False, onednn_linear.OneDNNLinearModule),
        ("auto", True, False, True, nn.Linear),  # plain until the first batch is timed
        ("auto", True, True, False, onednn_linear.OneDNNLinearModule),  # one rule for all ranks
        ("auto", False, False, False, nn.Linear),  # not a CPU run (or compiled)
    ],
)
def test_prepare(tmp_path, monkeypatch, setting, cpu, distributed, timed, layer):
    monkeypatch.setenv("ATTNKIT_CACHE_DIR", str(tmp_path))
    model = mlp()
    assert matmul_choice.prepare(model, setting, cpu=cpu, distributed=distributed) == (timed, "")
    assert kinds(model) == {layer}


def test_prepare_reads_the_earlier_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNKIT_CACHE_DIR", str(tmp_path))
    model = mlp()
    matmul_choice.remember(model, "onednn")
    timed, note = matmul_choice.prepare(model, "auto", cpu=True, distributed=False)
    assert not timed and "chosen on this machine before" in note
    assert kinds(model) == {onednn_linear.OneDNNLinearModule}


# -- in the trainer ------------------------------------------------------------------


def _trainer(out, cpu_matmul: str):
    from attnkit.data.synthetic import number_splits
    from attnkit.data.tokenizers import CharTokenizer
    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import RunConfig
    from attnkit.training.tasks import TranslationTask

    pairs = number_splits(60, 0, 0, low=1, high=999, seed=0)["train"]
    run = RunConfig.from_dict(
        {
            "model": {"preset": "small", "d_model": 32, "num_heads": 2, "d_ff": 64,
                      "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 96,
                      "dropout": 0.3},  # dropout draws: the timing must not shift them
            "train": {"max_steps": 3, "max_tokens": 400, "warmup_steps": 2, "log_every": 1,
                      "eval_every": 100, "save_every": 0, "cpu_matmul": cpu_matmul},
        }
    )  # fmt: skip
    texts = [s for s, _ in pairs] + [t for _, t in pairs]
    return Trainer(
        run, TranslationTask(run, CharTokenizer.train(texts), pairs), out, progress=False
    )


def test_auto_trains_exactly_as_its_choice_made_up_front(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNKIT_CACHE_DIR", str(tmp_path / "cache"))
    auto = _trainer(tmp_path / "auto", "auto")
    assert auto._time_matmul and auto.matmul_note == ""
    auto.fit()
    backend = "onednn" if kinds(auto.model) == {onednn_linear.OneDNNLinearModule} else "mkl"
    assert kinds(auto.model) != {nn.Linear, onednn_linear.OneDNNLinearModule}
    assert f"auto: {backend}" in auto.matmul_note and "measured in" in auto.matmul_note
    fixed = _trainer(tmp_path / "fixed", backend)
    fixed.fit()
    for (name, p), q in zip(auto.model.state_dict().items(), fixed.model.state_dict().values()):
        assert torch.equal(p, q), name  # bit for bit: same products, same dropout masks
    again = _trainer(tmp_path / "again", "auto")  # the same model on this machine: not timed
    assert not again._time_matmul and f"auto: {backend}" in again.matmul_note
