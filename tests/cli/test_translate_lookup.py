"""`attnkit translate --prompt-lookup K`: greedy search's lines, drafted from the source."""

from __future__ import annotations

import pytest
import torch

from attnkit.checkpoints import save_checkpoint
from attnkit.cli.main import main
from attnkit.data.tokenizers import CharTokenizer
from attnkit.models import EncoderDecoder, TransformerConfig

TEXT = "anna and otto saw 12 boats at 3 pm near the old mill"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    tok = CharTokenizer.train([TEXT])
    config = TransformerConfig(d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                               num_decoder_layers=1, src_vocab_size=tok.vocab_size,
                               tgt_vocab_size=tok.vocab_size, max_len=96)  # fmt: skip
    out = tmp_path_factory.mktemp("mt") / "ckpt"
    save_checkpoint(out, model_state=EncoderDecoder(config).state_dict(),
                    config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    return out


@pytest.fixture
def lines(tmp_path):
    src = tmp_path / "in.txt"
    # short, blank, long (cut to the model's positions with a warning), repeated words
    src.write_text(f"anna\n\n{TEXT} {TEXT}\notto otto otto saw 12 12 12 boats\n", encoding="utf-8")
    return src


@pytest.mark.parametrize("extra", [[], ["--no-fast"]])
def test_prompt_lookup_prints_greedy_search_lines(checkpoint, lines, capsys, extra):
    base = ["translate", "--checkpoint", str(checkpoint), "--input", str(lines), *extra]
    assert main([*base, "--greedy"]) == 0
    plain = capsys.readouterr().out
    assert main(["--debug", *base, "--prompt-lookup", "6"]) == 0
    captured = capsys.readouterr()
    assert captured.out == plain and len(plain.splitlines()) == 4
    assert plain.splitlines()[1] == ""  # a blank line stays blank
    stats = next(x for x in captured.err.splitlines() if x.startswith("prompt lookup:"))
    assert "decoder passes" in stats and "drafted tokens accepted" in stats


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prompt-lookup", "-1"], "--prompt-lookup must be >= 0"),
        (["--prompt-lookup", "4", "--sample"], "greedy search only, not with --sample"),
        (["--prompt-lookup", "4", "--nbest", "2"], "not --nbest"),
        (
            ["--prompt-lookup", "4", "--engine", "ctranslate2", "--alpha", "0"],
            "--engine ctranslate2",
        ),
    ],
)
def test_what_prompt_lookup_cannot_do_is_one_line(checkpoint, lines, capsys, extra, message):
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(lines), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
