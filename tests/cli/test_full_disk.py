"""A full disk (ENOSPC, mocked) while train, export or average write: one line, nothing half-written."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import safetensors.torch
from safetensors import SafetensorError

from attnkit.checkpoints import save_checkpoint
from attnkit.cli.main import main
from attnkit.data.synthetic import number_splits
from attnkit.data.tokenizers import CharTokenizer
from attnkit.models import EncoderDecoder, TransformerConfig

CONFIG = """
task: translation
data: {{dir: {dir}, src_lang: en, tgt_lang: de, train: train, valid: null, max_len: 96}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 16, num_heads: 2, d_ff: 32,
        num_encoder_layers: 1, num_decoder_layers: 1, max_len: 128}}
train: {{max_steps: 4, max_tokens: 400, warmup_steps: 2, log_every: 1, eval_every: 100,
        save_every: 2, keep_last: 2, valid_bleu_sentences: 0}}
"""


def _full(*args, **kwargs):
    raise SafetensorError(
        'Error while serializing: I/O error: No space left on device (os error 28) at path "x"'
    )


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _hidden(directory: Path) -> list[str]:
    return [str(p) for p in directory.rglob(".*") if ".tmp-" in p.name or ".old-" in p.name]


def test_train_on_a_full_disk_stops_with_one_line_and_keeps_its_checkpoints(
    tmp_path, capsys, monkeypatch
):
    pairs = number_splits(40, 0, 0, low=1, high=999, seed=0)["train"]
    (tmp_path / "train.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (tmp_path / "train.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    config = tmp_path / "tiny.yaml"
    config.write_text(CONFIG.format(dir=tmp_path), encoding="utf-8")
    run = tmp_path / "run"
    argv = ["train", "--config", str(config), "--out", str(run), "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    kept = sorted(p.name for p in (run / "checkpoints").iterdir())
    weights = (run / "checkpoints" / kept[-1] / "model.safetensors").read_bytes()
    monkeypatch.setattr(safetensors.torch, "save_file", _full)
    code = main([*argv, "--resume", "--set", "train.max_steps=6"])
    err = _one_line(capsys)
    assert code == 1 and "no space left on device" in err and "step_00000006" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == kept
    assert (run / "checkpoints" / kept[-1] / "model.safetensors").read_bytes() == weights
    assert _hidden(run) == []


def _checkpoint(directory: Path) -> Path:
    tok = CharTokenizer.train(["one two three"])
    config = TransformerConfig(d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                               num_decoder_layers=1, src_vocab_size=tok.vocab_size,
                               tgt_vocab_size=tok.vocab_size, max_len=32)  # fmt: skip
    return save_checkpoint(directory, model_state=EncoderDecoder(config).state_dict(),
                           config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip


def test_export_on_a_full_disk_is_one_line_and_leaves_the_old_export(
    tmp_path, capsys, monkeypatch
):
    pytest.importorskip("transformers")
    from attnkit.interop import hf_export

    checkpoint = _checkpoint(tmp_path / "ck")
    out = tmp_path / "export"
    out.mkdir()
    (out / "config.json").write_text("{}")

    def write_half(directory: Path, *args, **kwargs) -> None:
        (directory / "config.json").write_text('{"half": ')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory / "model.bin"))

    monkeypatch.setattr(hf_export, "write_hf_directory", write_half)
    argv = ["export", "--checkpoint", str(checkpoint), "--to", "hf", "--out", str(out)]
    assert main([*argv, "--overwrite"]) == 1
    err = _one_line(capsys)
    assert f"--out {out}: cannot write (no space left on device)" in err
    assert (out / "config.json").read_text() == "{}" and _hidden(tmp_path) == []
