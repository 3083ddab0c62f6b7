"""Training fast paths (issue 6): compiled step, chunked loss through the model, fused AdamW."""

from __future__ import annotations

import pytest
import torch

from attnkit.losses import (
    chunked_label_smoothed_cross_entropy,
    label_smoothed_cross_entropy,
)
from attnkit.models import EncoderDecoder, TransformerConfig

PAD = 0


def tiny(dtype=torch.float32) -> EncoderDecoder:
    config = TransformerConfig.from_preset(
        "small",
        d_model=32,
        num_heads=4,
        d_ff=64,
        num_encoder_layers=1,
        num_decoder_layers=1,
        src_vocab_size=40,
        tgt_vocab_size=40,
        dropout=0.0,  # deterministic, so eager and compiled see the same function
        share_embeddings="all",  # tied output projection: its gradient has two paths
    )
    torch.manual_seed(0)
    return EncoderDecoder(config).to(dtype).train()


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, 40, (4, 9), generator=g)
    seq = torch.randint(3, 40, (4, 8), generator=g)
    src[1, 5:] = PAD
    seq[2, 6:] = PAD
    return src, seq[:, :-1], seq[:, 1:]


def loss_of(model: EncoderDecoder, src, tgt, labels, chunked: bool) -> torch.Tensor:
    kw = dict(epsilon=0.1, ignore_index=PAD, reduction="mean")
    if chunked:
        hidden = model(src, tgt, compute_logits=False).hidden
        weight = model.output_proj.weight
        return chunked_label_smoothed_cross_entropy(hidden, weight, labels, chunk_size=5, **kw).loss
    return label_smoothed_cross_entropy(model(src, tgt).logits, labels, **kw).loss


def grads(model: EncoderDecoder, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def test_chunked_loss_through_the_model_equals_the_plain_loss():
    # Through a tied projection, in float64: value and every parameter's gradient.
    model = tiny(torch.float64)
    src, tgt, labels = batch()
    plain = loss_of(model, src, tgt, labels, chunked=False)
    g_plain = grads(model, plain)
    chunked = loss_of(model, src, tgt, labels, chunked=True)
    g_chunked = grads(model, chunked)
    torch.testing.assert_close(chunked, plain.float())
    assert g_chunked.keys() == g_plain.keys()
    for name in g_plain:
        torch.testing.assert_close(g_chunked[name], g_plain[name], msg=name)


def _adamw_run(fused: bool | None, foreach: bool | None) -> list[torch.Tensor]:
    torch.manual_seed(0)
    params = [torch.randn(7, 5, requires_grad=True), torch.randn(5, requires_grad=True)]
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01, fused=fused, foreach=foreach)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return [p.detach() for p in params]


@pytest.mark.parametrize("variant", ["fused", "foreach"])
def test_fused_and_foreach_adamw_match_the_plain_update(variant):
    plain = _adamw_run(fused=False, foreach=False)
    try:
        fast = _adamw_run(fused=True, foreach=None) if variant == "fused" else None
    except RuntimeError as err:  # no fused kernel on this device: foreach is the fallback
        pytest.skip(f"fused AdamW unsupported here: {err}")
    if variant == "foreach":
        fast = _adamw_run(fused=None, foreach=True)
    for got, want in zip(fast, plain):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True])
def test_compiled_forward_and_loss_give_eager_loss_and_gradients(chunked):
    # Inductor on CPU compiles forward and backward: ~20-60 s on 2 shared cores.
    model = tiny()
    src, tgt, labels = batch()
    eager = loss_of(model, src, tgt, labels, chunked)
    g_eager = grads(model, eager)
    compiled_fn = torch.compile(loss_of)
    compiled = compiled_fn(model, src, tgt, labels, chunked)
    g_compiled = grads(model, compiled)  # backward outside the compiled function
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    for name in g_eager:
        torch.testing.assert_close(g_compiled[name], g_eager[name], rtol=1e-4, atol=1e-5, msg=name)


# -- train.fast in the trainer ---------------------------------------------------------


def _trainer(tmp_path, fast: str, **train):
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
                      "dropout": 0.0},
            "train": {"max_steps": 4, "max_tokens": 400, "warmup_steps": 2, "log_every": 1,
                      "eval_every": 100, "save_every": 0, "fast": fast,
                      "cpu_matmul": "mkl", **train},  # one GEMM library: same rounding
        }
    )  # fmt: skip
    texts = [s for s, _ in pairs] + [t for _, t in pairs]
    return Trainer(
        run, TranslationTask(run, CharTokenizer.train(texts), pairs), tmp_path, progress=False
    )


def test_fast_auto_is_off_on_cpu_and_on_turns_on_the_chunked_loss_and_compile(tmp_path):
    auto = _trainer(tmp_path / "auto", "auto")
    assert (auto.fast, auto.task.chunked, auto.compiled) == (False, False, False)
    on = _trainer(tmp_path / "on", "on")
    assert (on.fast, on.task.chunked, on.compiled) == (True, True, True)
    forced = _trainer(tmp_path / "forced", "off", compile=True)
    assert (forced.fast, forced.task.chunked, forced.compiled) == (False, False, True)


def test_fast_trainer_steps_match_the_plain_trainer(tmp_path):
    plain = _trainer(tmp_path / "plain", "off")
    fast = _trainer(tmp_path / "fast", "on")
    fast.compiled = False  # the compiled step is checked above; here the chunked loss
    for _ in range(3):
        a, b = plain.train_step(), fast.train_step()
        assert a["tokens"] == b["tokens"]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    for (name, p), q in zip(plain.model.state_dict().items(), fast.model.state_dict().values()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=name)
    # and it is really a different code path: the chunked loss was used
    assert fast.task.chunked and not plain.task.chunked


def test_a_failing_compile_is_one_error_that_names_the_way_out(tmp_path, monkeypatch):
    from attnkit.errors import TrainingError

    class FakeCompileError(RuntimeError):
        pass

    FakeCompileError.__module__ = "torch._inductor.exc"  # what a real one looks like

    class Broken(torch.nn.Module):
        def forward(self, *a, **k):
            raise FakeCompileError("C++ compiler not found\nmore detail")

    def broken_compile(module, *args, **kwargs):
        return Broken()

    monkeypatch.setattr(torch, "compile", broken_compile)
    trainer = _trainer(tmp_path, "on")
    with pytest.raises(TrainingError, match="--no-fast") as info:
        trainer.fit()
    assert "\n" not in str(info.value) and "C++ compiler not found" in str(info.value)
