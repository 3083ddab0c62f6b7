"""Tiny trained checkpoints of every family, and a real ``attnkit serve`` in a subprocess.

The checkpoints are trained once per session with ``attnkit train`` on a few
hundred number pairs (translation) or a short text (LM, MLM): seconds each.
``encoder_checkpoint(num_labels)`` builds an untrained encoder-only one, a text
classifier when ``num_labels > 0``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from server_helpers import Served, start_server, stop_server

from attnkit.checkpoints import save_checkpoint
from attnkit.cli.main import main
from attnkit.data.synthetic import number_splits
from attnkit.data.tokenizers import CharTokenizer
from attnkit.models import EncoderOnlyConfig, EncoderOnlyModel

_TRANSLATION = """
task: translation
data: {{dir: {dir}, src_lang: en, tgt_lang: de, train: train, valid: valid, max_len: 60}}
tokenizer: {{kind: char}}
model: {model}
train: {{max_steps: {steps}, max_tokens: 1500, schedule: constant, lr: 0.003, warmup_steps: 5,
        log_every: 10, eval_every: {steps}, save_every: 0, valid_bleu_sentences: 4}}
decode: {{beam: 2}}
"""
_MODELS = {
    "transformer": "{preset: small, d_model: 32, num_heads: 2, d_ff: 64, num_encoder_layers: 2, "
    "num_decoder_layers: 2, max_len: 64, dropout: 0.0}",
    "rnn": "{family: rnn, preset: small, embed_dim: 16, hidden_size: 24, max_len: 64, "
    "max_src_len: 64, dropout: 0.0}",
}
# Enough steps for the Transformer's cross-attention to pick out source tokens (the
# browser test hovers it); ~10 s on 2 CPU cores.
_STEPS = {"transformer": 400, "rnn": 60}
_TEXT_TASK = """
task: {task}
data: {{dir: {dir}, text: tiny.txt, valid_fraction: 0.2}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64, num_layers: 2, max_len: 24,
        dropout: 0.0}}
train: {{max_steps: {steps}, max_tokens: 256, schedule: constant, lr: 0.01, warmup_steps: 5,
        log_every: 10, eval_every: {steps}, save_every: 0}}
"""
TEXT = "the cat sat on the mat. the dog sat on the log. " * 40


def _train(root: Path, family: str) -> Path:
    """Train one tiny checkpoint of ``family`` under ``root``; return the run directory."""
    if family in _MODELS:
        for split, pairs in number_splits(300, 8, 6, low=1, high=999, seed=0).items():
            for lang, side in (("en", 0), ("de", 1)):
                text = "".join(p[side] + "\n" for p in pairs)
                (root / f"{split}.{lang}").write_text(text, encoding="utf-8")
        config = _TRANSLATION.format(dir=root, model=_MODELS[family], steps=_STEPS[family])
    else:
        (root / "tiny.txt").write_text(TEXT, encoding="utf-8")
        task = {"decoder_only": "lm", "encoder_only": "mlm"}[family]
        config = _TEXT_TASK.format(task=task, dir=root, steps=40)
    (root / "run.yaml").write_text(config, encoding="utf-8")
    out = root / "run"
    code = main(["train", "--config", str(root / "run.yaml"), "--out", str(out), "--no-progress"])
    assert code == 0, f"training the tiny {family} checkpoint failed"
    return out


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``checkpoint(family)``: a trained run directory of that family (trained once)."""
    runs: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in runs:
            runs[family] = _train(tmp_path_factory.mktemp(f"serve-{family}"), family)
        return runs[family]

    return get


def _build_encoder(out: Path, num_labels: int) -> Path:
    torch.manual_seed(1)
    tok = CharTokenizer.train(["the cat sat on the mat. a dog on the log."])
    config = EncoderOnlyConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, max_len=48,
                               vocab_size=tok.vocab_size + 1, mask_id=tok.vocab_size,
                               num_labels=num_labels, type_vocab_size=2, dropout=0.0,
                               label_names=["neg", "neu", "pos"][:num_labels])  # fmt: skip
    model = EncoderOnlyModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:  # spread the probabilities: a mixed-up row would show
                p.mul_(3.0)
    save_checkpoint(out, model_state=model.state_dict(), config=config.to_dict(),
                    tokenizer_json=tok.to_json())  # fmt: skip
    return out


@pytest.fixture(scope="session")
def encoder_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Path]:
    """``encoder_checkpoint(num_labels)``: a tiny random encoder-only checkpoint (built once
    per ``num_labels``): an MLM head, and with ``num_labels`` > 0 a classification head
    (labels ``neg``, ``neu``, ``pos``, in that order); segment embeddings, a character
    tokenizer, 48 positions."""
    runs: dict[int, Path] = {}

    def get(num_labels: int) -> Path:
        if num_labels not in runs:
            out = tmp_path_factory.mktemp(f"encoder-{num_labels}") / "run"
            runs[num_labels] = _build_encoder(out, num_labels)
        return runs[num_labels]

    return get


@pytest.fixture(scope="session")
def served_lm(checkpoint: Callable[[str], Path]) -> Iterator[Served]:
    """The real server on the tiny decoder-only LM."""
    served = start_server(checkpoint("decoder_only"))
    yield served
    stop_server(served)


@pytest.fixture
def fresh_server() -> Iterator[Callable[..., Served]]:
    """``fresh_server(run, *options)``: a server of this test's own, stopped afterwards."""
    started: list[Served] = []

    def start(run: Path, *extra: str) -> Served:
        started.append(start_server(run, *extra))
        return started[-1]

    yield start
    for served in started:
        stop_server(served)


@pytest.fixture(scope="session")
def served_transformer(checkpoint: Callable[[str], Path]) -> Iterator[Served]:
    """The real server (uvicorn, subprocess) on the tiny Transformer, short read timeout."""
    served = start_server(
        checkpoint("transformer"),
        "--read-timeout", "1.5",
        "--max-connections", "48",  # test_server.py fills them
    )  # fmt: skip
    yield served
    stop_server(served)


class Spy:
    """A stepper that counts ``start``/``step`` calls and runs ``at_step(n)`` after step n."""

    def __init__(self, inner: Any, at_step: Callable[[int], object]) -> None:
        self.inner, self.at_step = inner, at_step
        self.pad_id, self.bos_id, self.eos_id = inner.pad_id, inner.bos_id, inner.eos_id
        self.starts = self.steps = 0

    def start(self, src_ids: Any, *, max_steps: int | None = None) -> Any:
        self.starts += 1
        return self.inner.start(src_ids, max_steps=max_steps)

    def step(self, tokens: Any, state: Any) -> Any:
        self.steps += 1
        out = self.inner.step(tokens, state)
        self.at_step(self.steps)
        return out


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Spy]:
    """``spy(engine, at_step=None)``: put a ``Spy`` between ``engine`` and its model."""

    def install(engine: Any, at_step: Callable[[int], object] = lambda n: None) -> Spy:
        stepper = Spy(engine.stepper, at_step)
        monkeypatch.setattr(engine, "stepper", stepper)
        return stepper

    return install
