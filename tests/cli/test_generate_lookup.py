"""`attnkit generate --prompt-lookup K`: the greedy text, drafted from earlier text; sampling."""

from __future__ import annotations

import pytest
import torch

from attnkit.checkpoints import checkpoint_dir, save_checkpoint
from attnkit.cli import main as cli_main
from attnkit.data.tokenizers import CharTokenizer
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig

TEXT = "to be or not to be, that is the question\n"
PROMPT = "to be or not to be, to be or not to be, to be"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch.manual_seed(0)
    tok = CharTokenizer.train([TEXT])
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=96,
        vocab_size=tok.vocab_size, dropout=0.0,
    )  # fmt: skip
    run = tmp_path_factory.mktemp("lm")
    save_checkpoint(checkpoint_dir(run, 1), model_state=DecoderOnlyLM(config).state_dict(),
                    config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    return run


@pytest.fixture
def attnkit(monkeypatch, capsys):
    commands = {**cli_main.COMMANDS, "generate": ("attnkit.cli.generate", "generate text")}
    monkeypatch.setattr(cli_main, "COMMANDS", commands)

    def call(*argv: str) -> tuple[int, str, str]:
        rc = cli_main.main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    return call


@pytest.mark.parametrize("n", ["30", "60"])  # 60: past the context, the window slides
def test_prompt_lookup_prints_the_greedy_text(run, attnkit, n):
    base = ["generate", "--checkpoint", str(run), "--prompt", PROMPT, "--temperature", "0",
            "--max-new-tokens", n, "--ignore-eos"]  # fmt: skip
    rc, plain, _ = attnkit(*base)
    assert rc == 0
    rc, looked_up, err = attnkit("--debug", *base, "--prompt-lookup", "8")
    assert rc == 0 and looked_up == plain and len(plain) > len(PROMPT) + 20
    line = next(x for x in err.splitlines() if x.startswith("prompt lookup:"))
    assert f"{n} tokens in" in line and "tokens/pass" in line and "tokens/s" in line
    assert "accepted tokens/step" in line and "speed-up" in line


def test_prompt_lookup_samples_reproducibly(run, attnkit):
    base = [
        "generate",
        "--checkpoint",
        str(run),
        "--prompt",
        PROMPT,
        "--temperature",
        "0.8",
        "--top-k",
        "5",
        "--max-new-tokens",
        "30",
        "--ignore-eos",
        "--prompt-lookup",
        "6",
    ]
    rc, first, _ = attnkit(*base, "--seed", "3")
    assert rc == 0 and len(first) > len(PROMPT)
    assert attnkit(*base, "--seed", "3")[1] == first


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--temperature", "0", "--engine", "llama.cpp"], "--prompt-lookup: attnkit's own"),
     (["--prompt-lookup", "-1", "--temperature", "0"], "--prompt-lookup must be >= 0")],
)  # fmt: skip
def test_refused_combinations_are_one_line_errors(run, attnkit, extra, message):
    rc, out, err = attnkit("generate", "--checkpoint", str(run), "--prompt-lookup", "4", *extra)
    assert rc == 2 and out == "" and message in err and len(err.splitlines()) == 1
