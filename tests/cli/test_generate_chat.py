"""`attnkit generate --chat`: the prompt as a user turn in the model's chat template."""

from __future__ import annotations

from pathlib import Path

import torch
from chat_helpers import SMOLLM2_TEMPLATE, chatml_tokenizer

from attnkit.checkpoints import save_checkpoint
from attnkit.cli.main import main
from attnkit.decoding.generate import generate
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig


def _checkpoint(tmp_path: Path, template: str | None) -> tuple[Path, DecoderOnlyLM, object]:
    torch.manual_seed(0)
    tok = chatml_tokenizer(template)
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=128,
        vocab_size=tok.vocab_size, pad_id=0, bos_id=1, eos_id=2, dropout=0.0,
    )  # fmt: skip
    model = DecoderOnlyLM(config).eval()
    out = tmp_path / "chat"
    save_checkpoint(out, model_state=model.state_dict(), config=config.to_dict(),
                    tokenizer_json=tok.to_json())  # fmt: skip
    return out, model, tok


def test_chat_applies_the_template_and_prints_the_reply(tmp_path, capsys):
    out, model, tok = _checkpoint(tmp_path, SMOLLM2_TEMPLATE)
    code = main(["generate", "--checkpoint", str(out), "--chat", "--system", "Be brief.",
                 "--prompt", "Capital of France?", "--temperature", "0", "--max-new-tokens", "8",
                 "--ignore-eos", "--device", "cpu"])  # fmt: skip
    assert code == 0
    rendered = (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nCapital of France?"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = torch.tensor([tok.encode(rendered)])
    with torch.no_grad():
        new = generate(model, ids, 8, temperature=0.0)[0, ids.size(1) :].tolist()
    reply = tok.decode(new)
    assert capsys.readouterr().out == reply + "\n"  # the reply only, no echo of the template


def test_chat_without_a_template_is_a_usage_error(tmp_path, capsys):
    out, _, _ = _checkpoint(tmp_path, None)
    assert main(["generate", "--checkpoint", str(out), "--chat", "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnkit generate: error: --chat: this model's tokenizer has no chat")
    assert err.count("\n") == 1


def test_system_needs_chat(tmp_path, capsys):
    out, _, _ = _checkpoint(tmp_path, SMOLLM2_TEMPLATE)
    assert main(["generate", "--checkpoint", str(out), "--system", "x", "--prompt", "hi"]) == 2
    assert "--system: only with --chat" in capsys.readouterr().err
