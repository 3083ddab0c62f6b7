"""``attnkit evaluate --context N``: scoring a language model on blocks longer than trained.

Sinusoidal, rotary and ALiBi positions have no weights tied to ``max_len``,
so the checkpoint is rebuilt with ``max_len = N`` and scored; a learned
position table stops at its last row, which is a one-line error.
"""

from __future__ import annotations

import json

import pytest
import torch

from attnkit import checkpoints as ckpt
from attnkit.cli.main import main
from attnkit.data.tokenizers import CharTokenizer
from attnkit.evaluation.perplexity import text_perplexity
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig

TEXT = "to be or not to be, that is the question. " * 30


def _checkpoint(tmp_path, positions: str):
    tok = CharTokenizer.train([TEXT])
    config = DecoderOnlyConfig(
        d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=16, dropout=0.0,
        vocab_size=tok.vocab_size, positions=positions,
    )  # fmt: skip
    model = DecoderOnlyLM(config).eval()
    directory = tmp_path / positions
    ckpt.save_checkpoint(directory, model_state=model.state_dict(), config=config.to_dict(),
                         tokenizer_json=tok.to_json())  # fmt: skip
    text = tmp_path / "valid.txt"
    text.write_text(TEXT, encoding="utf-8")
    return directory, text, model, tok


@pytest.mark.parametrize("positions", ["sinusoidal", "rotary", "alibi"])
def test_longer_context_rebuilds_the_model(tmp_path, capsys, positions):
    directory, text, model, tok = _checkpoint(tmp_path, positions)
    args = ["evaluate", "--checkpoint", str(directory), "--text", str(text), "--json"]
    assert main([*args, "--context", "64"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["context"] == 64
    # The same number from a model built at max_len 64 with the same weights.
    longer = DecoderOnlyLM(model.config.replace(max_len=64)).eval()
    longer.load_state_dict(model.state_dict())
    ids = torch.tensor(tok.encode(TEXT))
    expected = text_perplexity(longer, ids, masked=False)
    assert result["loss"] == pytest.approx(expected["loss"], rel=1e-5)
    assert result["tokens"] == expected["tokens"] == (ids.numel() - 1) // 64 * 64
    # Shorter blocks than trained need no rebuild; the default is max_len.
    assert main([*args, "--context", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["context"] == 8
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["context"] == 16


def test_learned_positions_stop_at_their_table(tmp_path, capsys):
    directory, text, _, _ = _checkpoint(tmp_path, "learned")
    rc = main(["evaluate", "--checkpoint", str(directory), "--text", str(text), "--context", "32"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "--context 32" in err and "learned position table has 16 rows" in err


def test_a_longer_model_that_would_not_fit_is_refused_before_it_is_built(
    tmp_path, capsys, monkeypatch
):
    import attnkit.memory_estimates

    directory, text, _, _ = _checkpoint(tmp_path, "sinusoidal")
    args = ["evaluate", "--checkpoint", str(directory), "--text", str(text)]
    real = attnkit.memory_estimates.available_bytes
    loaded_ok = {"done": False}

    def scarce(device="cpu"):  # enough to load the checkpoint, not for the longer model
        if not loaded_ok["done"]:
            loaded_ok["done"] = True
            return real(device)
        return 1000

    monkeypatch.setattr(attnkit.memory_estimates, "available_bytes", scarce)
    assert main([*args, "--context", "64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--context 64: the model needs at least" in err
    # Too short a text is named before any longer model is built.
    loaded_ok["done"] = False
    assert main([*args, "--context", "100000"]) == 1
    assert "too few for one block of 100000 + 1" in capsys.readouterr().err
