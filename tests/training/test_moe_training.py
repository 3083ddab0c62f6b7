"""Mixture-of-experts models in the trainer: the routers' auxiliary losses reach the
gradient, scaled so the update stays a per-token mean, and utilisation is logged."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from attnkit.data.lm import load_lm_corpus
from attnkit.data.synthetic import number_splits
from attnkit.data.tokenizers import CharTokenizer
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import TASK_CLASSES, TranslationTask
from attnkit.training.tasks.base import with_moe_losses

TEXT = "abcdefgh" * 80
MOE = {"ffn": "moe", "num_experts": 4, "moe_top_k": 2, "moe_loss_weight": 0.5,
       "z_loss_weight": 0.1}  # fmt: skip


def _lm_trainer(tmp_path, task: str = "lm", *, model=None, **train) -> Trainer:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    train = {"max_steps": 3, "max_tokens": 128, "warmup_steps": 1, "schedule": "constant",
             "lr": 3e-3, "log_every": 1, "eval_every": 100, "save_every": 0, "eval_blocks": 2,
             **train}  # fmt: skip
    run = RunConfig.from_dict({
        "task": task,
        "data": {"dir": str(tmp_path), "text": "input.txt"},
        "tokenizer": {"kind": "char"},
        "model": {"preset": "small", "d_model": 32, "num_heads": 2, "d_ff": 64, "num_layers": 2,
                  "max_len": 16, "dropout": 0.0, **(model or {})},
        "train": train,
    })  # fmt: skip
    return Trainer(run, TASK_CLASSES[task](run, load_lm_corpus(path)), tmp_path / "run",
                   progress=False)  # fmt: skip


def _routers(model) -> list[torch.nn.Module]:
    return [m.router for m in model.modules() if hasattr(m, "router")]


def _router_grads(trainer: Trainer, loss: torch.Tensor) -> list[torch.Tensor]:
    trainer.model.zero_grad(set_to_none=True)
    loss.backward()
    return [r.weight.grad.clone() for r in _routers(trainer.model)]


@pytest.mark.parametrize("task", ["lm", "mlm"])
def test_the_weighted_aux_losses_reach_the_router_gradient_scaled_by_tokens(tmp_path, task):
    trainer = _lm_trainer(tmp_path, task, model=MOE)
    trainer.model.double()
    batch, _ = trainer.task.next_batch()
    config = trainer.task.model_config
    sums = trainer.task.loss(trainer.model, batch)
    with_aux = _router_grads(trainer, sums.loss)
    # The aux report of the same forward (no dropout: the same routing).
    inputs = batch[0]
    out = trainer.model(inputs) if task == "lm" else trainer.model(inputs, classify=False)
    aux = sums.tokens * (0.5 * out.moe.load_balancing_loss + 0.1 * out.moe.z_loss)
    torch.testing.assert_close(sums.loss - sums.nll, aux.detach())
    assert sums.metrics["moe_balance_loss"] == pytest.approx(
        float(out.moe.load_balancing_loss.detach())
    )
    aux_grads = _router_grads(trainer, aux)
    # With both weights at 0 the loss is the NLL, and the router's gradient lacks
    # exactly the aux terms' gradient.
    trainer.task.model_config = dataclasses.replace(config, moe_loss_weight=0.0,
                                                    z_loss_weight=0.0)  # fmt: skip
    plain = trainer.task.loss(trainer.model, batch)
    assert float(plain.loss.detach()) == pytest.approx(float(plain.nll), rel=1e-12)
    without = _router_grads(trainer, plain.loss)
    assert len(with_aux) == 2  # both layers are mixtures
    for a, b, g in zip(with_aux, without, aux_grads):
        assert g.abs().max() > 1e-6  # the aux terms do move the router
        torch.testing.assert_close(a - b, g)


def test_with_moe_losses_adds_tokens_times_the_weighted_means():
    from attnkit.blocks.moe import MoEAux

    moe = MoEAux(torch.tensor(1.5), torch.tensor(2.0), torch.tensor([0.75, 0.25]),
                 torch.tensor(3), assignments=12)  # fmt: skip
    config = type("C", (), {"moe_loss_weight": 0.01, "z_loss_weight": 0.001})()
    sums = with_moe_losses(torch.tensor(10.0), torch.tensor(10.0), 6, moe, config)
    assert float(sums.loss) == pytest.approx(10.0 + 6 * (0.015 + 0.002))
    assert sums.metrics == {"moe_balance_loss": 1.5, "moe_z_loss": 2.0, "moe_drop_rate": 0.25,
                            "expert_util_0": 0.75, "expert_util_1": 0.25}  # fmt: skip
    assert with_moe_losses(torch.tensor(1.0), torch.tensor(1.0), 6, None, config).metrics == {}


def test_utilisation_and_drop_rate_are_in_metrics_jsonl(tmp_path):
    trainer = _lm_trainer(tmp_path, model={**MOE, "capacity_factor": 1.0}, grad_accum=2)
    trainer.fit()
    lines = (trainer.out_dir / "metrics.jsonl").read_text().splitlines()
    train = [r for r in map(json.loads, lines) if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    for record in train:
        shares = [record[f"expert_util_{i}"] for i in range(4)]
        assert sum(shares) == pytest.approx(1.0) and all(0 <= s <= 1 for s in shares)
        assert 0.0 <= record["moe_drop_rate"] < 1.0 and record["moe_balance_loss"] > 0.5
        assert record["loss"] > record["nll"]  # the aux terms are in the objective


def test_a_dense_model_logs_no_expert_metrics_and_its_loss_is_its_nll(tmp_path):
    trainer = _lm_trainer(tmp_path)
    stats = trainer.train_step()
    assert stats["metrics"] == {} and stats["loss"] == stats["nll"]


def test_translation_adds_the_aux_losses_of_an_moe_transformer(tmp_path):
    pairs = number_splits(40, 4, 0, low=1, high=99, seed=0)["train"]
    tokenizer = CharTokenizer.train([s for s, _ in pairs] + [t for _, t in pairs])
    run = RunConfig.from_dict({
        "model": {"preset": "small", "d_model": 32, "num_heads": 2, "d_ff": 64,
                  "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 64, **MOE},
        "train": {"max_tokens": 200, "warmup_steps": 1, "label_smoothing": 0.0, "log_every": 1,
                  "save_every": 0, "valid_bleu_sentences": 0},
    })  # fmt: skip
    trainer = Trainer(run, TranslationTask(run, tokenizer, pairs), tmp_path, progress=False)
    stats = trainer.train_step()
    assert stats["loss"] > stats["nll"]  # no smoothing: the difference is the aux terms
    assert set(stats["metrics"]) >= {"expert_util_0", "moe_drop_rate"}
