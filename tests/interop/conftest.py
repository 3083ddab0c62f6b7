"""Fixtures of the export/import tests.

* A trained quickstart-size run and random checkpoints: the run is trained
  through the real CLI on synthetic number pairs (as
  tests/cli/test_cli_end_to_end.py does), once per session; the exports are
  made from it once per session too.
* SmolLM2 imported once (``smollm2_run``: the GGUF import and export tests).
* The SmolLM2 GGUF tests' Hugging Face model and tokenizer, loaded once:
  loading the model through ``transformers``' GGUF reader takes 13-19 s on
  the 2-core CPU, so ``test_gguf.py`` and ``test_gguf_import.py`` share one
  copy. ``gguf_helpers.LOAD_TIMES`` collects the load times they print.

Nothing is downloaded (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import gguf_helpers
import interop_helpers
import pytest
import torch
from gguf_helpers import LOAD_TIMES

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# Session fixtures shared with tests/engines (the engines run these checkpoints).
bpe_checkpoint = interop_helpers.bpe_checkpoint
smollm2 = gguf_helpers.smollm2
smollm2_run = gguf_helpers.smollm2_run

CONFIG = """
task: translation
data: {{dir: {dir}, src_lang: en, tgt_lang: de, train: train, valid: valid, test: test,
        max_len: 96}}
tokenizer: {{kind: {tokenizer}, vocab_size: 160}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64,
        num_encoder_layers: 2, num_decoder_layers: 2, max_len: 128, dropout: 0.0}}
train: {{max_steps: 40, max_tokens: 1200, warmup_steps: 10, lr: 2.0, log_every: 20,
        eval_every: 40, save_every: 40, keep_last: 1, valid_bleu_sentences: 4}}
decode: {{beam: 2}}
"""


def train_tiny(root: Path, tokenizer: str = "char") -> Path:
    """Train a tiny en->de numbers model through ``attnkit train``; returns the run dir."""
    from attnkit.cli.main import main
    from attnkit.data.synthetic import number_splits

    splits = number_splits(300, 12, 16, low=1, high=999, seed=0)
    for split, pairs in splits.items():
        (root / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (root / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    config = root / "tiny.yaml"
    config.write_text(CONFIG.format(dir=root, tokenizer=tokenizer), encoding="utf-8")
    out = root / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A trained char-tokenizer run (its test split: ``run.parent / 'test.en'``)."""
    return train_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def test_lines(tiny_run) -> list[str]:
    return (tiny_run.parent / "test.en").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="session")
def hf_export(tiny_run, tmp_path_factory) -> Path:
    """``attnkit export --to hf`` of the tiny run, through the CLI."""
    from attnkit.cli.main import main

    out = tmp_path_factory.mktemp("exports") / "hf"
    assert main(["export", "--checkpoint", str(tiny_run), "--to", "hf", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def hf_model(smollm2):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    start = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        smollm2.parent, gguf_file=smollm2.name, dtype=torch.float32
    )
    LOAD_TIMES["HF AutoModelForCausalLM.from_pretrained(gguf_file=)"] = time.perf_counter() - start
    return model.eval()


@pytest.fixture(scope="session")
def hf_tokenizer(smollm2):
    transformers = pytest.importorskip("transformers")
    start = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(smollm2.parent, gguf_file=smollm2.name)
    LOAD_TIMES["HF AutoTokenizer.from_pretrained(gguf_file=)"] = time.perf_counter() - start
    return tok
