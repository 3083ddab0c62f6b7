"""LoRA runs end to end: `attnkit train --init BASE` with train.lora, checkpoints of the
adapters alone, resume, merge, and instruction tuning on top."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from chat_helpers import SMOLLM2_TEMPLATE, chatml_tokenizer
from lora_helpers import TEXT, save_base

from attnkit.adapters import LoRAConfig, install_lora
from attnkit.checkpoints import MODEL_FILE, latest_checkpoint, load_model, load_tensors
from attnkit.checkpoints import save_checkpoint as write_checkpoint
from attnkit.checkpoints.adapters import ADAPTER_FILE, weights_sha256
from attnkit.cli.main import main
from attnkit.models import DecoderOnlyConfig, build_model

LORA = {"rank": 4, "alpha": 8, "targets": ["q", "v", "o", "ffn"]}


def _config(tmp_path: Path, **train) -> Path:
    (tmp_path / "text.txt").write_text(TEXT * 20, encoding="utf-8")
    config = {
        "task": "lm",
        "data": {"dir": str(tmp_path), "text": "text.txt", "block_size": 16},
        "train": {"lora": LORA, "max_tokens": 64, "schedule": "constant", "lr": 1e-2,
                  "warmup_steps": 0, "log_every": 1, "eval_every": 4, "eval_blocks": 4,
                  "save_every": 4, "max_steps": 8, "seed": 3, **train},
    }  # fmt: skip
    path = tmp_path / "lora.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _train(tmp_path: Path, out: Path, *extra: str) -> int:
    config = _config(tmp_path)
    return main(["train", "--config", str(config), "--init", str(tmp_path / "base"),
                 "--out", str(out), "--no-progress", "--device", "cpu", *extra])  # fmt: skip


def _losses(run: Path, split: str = "train") -> list[float]:
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["split"] == split]


def test_a_lora_run_saves_the_adapters_and_a_reference_to_its_base(tmp_path, capsys):
    base = tmp_path / "base"
    save_base(base)
    run = tmp_path / "run"
    assert _train(tmp_path, run) == 0
    printed = capsys.readouterr().out
    assert "trainable" in printed
    ckpt = latest_checkpoint(run)
    saved = load_tensors(ckpt / MODEL_FILE)
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)
    info = json.loads((ckpt / ADAPTER_FILE).read_text())
    assert info["base"] == {"path": str(base.resolve()), "sha256": weights_sha256(base)}
    assert info["lora"]["targets"] == LORA["targets"]
    losses = _losses(run)
    assert losses[-1] < losses[0] - 0.1  # a few steps learn
    # Loading merges the adapters into the base: the same logits as the trained model.
    model = load_model(run, "cpu").model
    assert not any("lora" in name for name in model.state_dict())


def test_resume_of_a_lora_run_is_bit_identical(tmp_path):
    save_base(tmp_path / "base")
    straight, resumed = tmp_path / "a", tmp_path / "b"
    assert _train(tmp_path, straight) == 0
    assert _train(tmp_path, resumed, "--set", "train.max_steps=4") == 0
    assert _train(tmp_path, resumed, "--resume") == 0
    assert _losses(straight) == _losses(resumed)
    a = load_tensors(latest_checkpoint(straight) / MODEL_FILE)
    b = load_tensors(latest_checkpoint(resumed) / MODEL_FILE)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_changed_base_is_refused(tmp_path, capsys):
    save_base(tmp_path / "base")
    run = tmp_path / "run"
    assert _train(tmp_path, run) == 0
    save_base(tmp_path / "base", seed=5)  # other weights under the same path
    capsys.readouterr()
    code = main(["generate", "--checkpoint", str(run), "--prompt", "the", "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert "is not the base these adapters were trained on" in err


def test_lora_needs_init(tmp_path, capsys):
    config = _config(tmp_path, max_steps=1)
    code = main(["train", "--config", str(config), "--out", str(tmp_path / "x")])
    assert code == 2
    assert "train.lora: adapts the frozen weights of a pretrained model" in capsys.readouterr().err


def test_merged_run_equals_the_trained_adapters(tmp_path):
    """The model the trainer ends with (base + adapters) against `attnkit merge`'s output."""
    save_base(tmp_path / "base")
    run = tmp_path / "run"
    assert _train(tmp_path, run) == 0
    merged = tmp_path / "merged"
    assert main(["merge", "--checkpoint", str(run), "--out", str(merged)]) == 0
    base = load_model(tmp_path / "base", "cpu").model
    install_lora(base, LoRAConfig(**LORA))
    adapters = load_tensors(latest_checkpoint(run) / MODEL_FILE)
    base.load_state_dict(adapters, strict=False)
    ids = torch.randint(3, 20, (2, 12))
    with torch.no_grad():
        expected = base.eval()(ids).logits
        got = load_model(merged, "cpu").model(ids).logits
    assert (got - expected).abs().max() < 1e-5


@pytest.mark.parametrize("lora", [True, False])
def test_instruction_tuning_from_a_chat_model(tmp_path, lora):
    tok = chatml_tokenizer(SMOLLM2_TEMPLATE)
    torch.manual_seed(0)
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=128,
        vocab_size=tok.vocab_size, pad_id=0, bos_id=1, eos_id=2, dropout=0.0,
    )  # fmt: skip
    model = build_model(config)
    write_checkpoint(tmp_path / "chat", model_state=model.state_dict(),
                     config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    records = [{"messages": [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "Capital of France?"},
                             {"role": "assistant", "content": "Paris."}]},
               {"prompt": "Capital of Italy?", "completion": " Rome."}] * 8  # fmt: skip
    (tmp_path / "train.jsonl").write_text("\n".join(map(json.dumps, records)), encoding="utf-8")
    run_config = {
        "task": "instruction",
        "data": {"dir": str(tmp_path), "train": "train.jsonl", "valid": None},
        "train": {"max_tokens": 256, "schedule": "constant", "lr": 1e-2, "warmup_steps": 0,
                  "log_every": 1, "eval_every": 10, "save_every": 10, "max_steps": 10,
                  **({"lora": LORA} if lora else {})},
    }  # fmt: skip
    (tmp_path / "sft.yaml").write_text(json.dumps(run_config), encoding="utf-8")
    out = tmp_path / "sft"
    code = main(["train", "--config", str(tmp_path / "sft.yaml"), "--init",
                 str(tmp_path / "chat"), "--out", str(out), "--no-progress"])  # fmt: skip
    assert code == 0
    losses = _losses(out)
    assert losses[-1] < losses[0] - 0.5
    assert (latest_checkpoint(out) / ADAPTER_FILE).exists() == lora
    code = main(["generate", "--checkpoint", str(out), "--chat", "--system", "Be brief.",
                 "--prompt", "Capital of France?", "--temperature", "0"])  # fmt: skip
    assert code == 0
