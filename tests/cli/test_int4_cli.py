"""``--precision int4`` through ``attnkit generate`` and ``attnkit translate`` on tiny
random checkpoints whose linears the CPU int4 kernel takes (widths of 32)."""

from __future__ import annotations

import pytest
import torch

from attnkit.checkpoints import save_checkpoint
from attnkit.cli.main import main
from attnkit.data.tokenizers import CharTokenizer
from attnkit.kernels import torch_ops
from attnkit.models import EncoderDecoder, TransformerConfig
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.quantize import Int4Linear

TEXT = "one two three four five six seven"


@pytest.fixture
def int4_calls(monkeypatch):
    calls: list[int] = []
    real = Int4Linear.forward
    monkeypatch.setattr(Int4Linear, "forward", lambda self, x: calls.append(1) or real(self, x))
    return calls


def test_generate_int4(tmp_path, capsys, int4_calls):
    torch.manual_seed(0)
    tok = CharTokenizer.train([TEXT])
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=32,
        vocab_size=tok.vocab_size, dropout=0.0,
    )  # fmt: skip
    save_checkpoint(tmp_path, model_state=DecoderOnlyLM(config).state_dict(),
                    config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    argv = ["generate", "--checkpoint", str(tmp_path), "--prompt", "one", "--precision", "int4",
            "--max-new-tokens", "8", "--temperature", "0"]  # fmt: skip
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("one") and int4_calls


def test_translate_int4(tmp_path, capsys, int4_calls):
    torch.manual_seed(0)
    tok = CharTokenizer.train([TEXT])
    config = TransformerConfig(d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                               num_decoder_layers=1, src_vocab_size=tok.vocab_size,
                               tgt_vocab_size=tok.vocab_size, max_len=32)  # fmt: skip
    save_checkpoint(tmp_path / "ckpt", model_state=EncoderDecoder(config).state_dict(),
                    config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    src = tmp_path / "in.txt"
    src.write_text("one two\nthree\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(tmp_path / "ckpt"), "--input", str(src),
            "--precision", "int4", "--max-len", "8"]  # fmt: skip
    assert main(argv) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2 and int4_calls


def test_without_the_kernel_generate_fails_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch_ops, "int4_unavailable", lambda: "torch 9 has no aten.x")
    torch.manual_seed(0)
    tok = CharTokenizer.train([TEXT])
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=32,
        vocab_size=tok.vocab_size, dropout=0.0,
    )  # fmt: skip
    save_checkpoint(tmp_path, model_state=DecoderOnlyLM(config).state_dict(),
                    config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    argv = ["generate", "--checkpoint", str(tmp_path), "--prompt", "one", "--precision", "int4"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--precision int4: torch 9 has no aten.x" in err and len(err.strip().splitlines()) == 1
