"""`attnkit generate --draft CKPT`: a small model drafts, the text is plain greedy's."""

from __future__ import annotations

import pytest
import torch
from cli_helpers import tiny_checkpoint

from attnkit.checkpoints import checkpoint_dir, save_checkpoint
from attnkit.cli import main as cli_main
from attnkit.data.tokenizers import CharTokenizer
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig

TEXT = "to be or not to be, that is the question\n"
PROMPT = "to be or not to be, that"


def save_lm(directory, text: str, seed: int, layers: int):
    torch.manual_seed(seed)
    tok = CharTokenizer.train([text])
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=layers, max_len=96,
        vocab_size=tok.vocab_size, dropout=0.0,
    )  # fmt: skip
    save_checkpoint(checkpoint_dir(directory, 1), model_state=DecoderOnlyLM(config).state_dict(),
                    config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    return str(directory)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    make = tmp_path_factory.mktemp
    return {
        "target": save_lm(make("target"), TEXT, 0, 2),
        "draft": save_lm(make("draft"), TEXT, 1, 1),
        "other_vocab": save_lm(make("other"), "a different text entirely\n", 1, 1),
        "seq2seq": str(tiny_checkpoint(make("mt") / "ckpt")),
    }


@pytest.fixture
def attnkit(monkeypatch, capsys):
    commands = {**cli_main.COMMANDS, "generate": ("attnkit.cli.generate", "generate text")}
    monkeypatch.setattr(cli_main, "COMMANDS", commands)

    def call(*argv: str) -> tuple[int, str, str]:
        rc = cli_main.main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    return call


def base(runs, *extra: str) -> list[str]:
    return ["generate", "--checkpoint", runs["target"], "--prompt", PROMPT,
            "--max-new-tokens", "40", "--ignore-eos", *extra]  # fmt: skip


def stats_line(err: str) -> str:
    return next(x for x in err.splitlines() if x.startswith("draft model:"))


def test_a_draft_prints_the_greedy_text(runs, attnkit):
    rc, plain, _ = attnkit(*base(runs, "--temperature", "0"))
    assert rc == 0 and len(plain) > len(PROMPT) + 30
    rc, drafted, err = attnkit("--debug", *base(runs, "--temperature", "0", "--draft",
                                                runs["draft"], "--draft-tokens", "3"))  # fmt: skip
    assert rc == 0 and drafted == plain
    line = stats_line(err)
    assert "40 tokens in" in line and "accepted tokens/step" in line and "speed-up" in line


def test_the_model_as_its_own_draft_has_every_token_accepted(runs, attnkit):
    rc, _, err = attnkit("--debug", *base(runs, "--temperature", "0", "--draft", runs["target"]))
    line = stats_line(err)
    drafted = int(line.split(" drafted accepted")[0].split(" of ")[-1])
    assert rc == 0 and drafted > 0 and f"{drafted} of {drafted} drafted accepted" in line


def test_a_draft_samples_reproducibly(runs, attnkit):
    argv = base(runs, "--temperature", "0.9", "--top-p", "0.9", "--draft", runs["draft"])
    rc, first, _ = attnkit(*argv, "--seed", "5")
    assert rc == 0 and len(first) > len(PROMPT)
    assert attnkit(*argv, "--seed", "5")[1] == first


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--draft", "{draft}", "--prompt-lookup", "4"], "--draft and --prompt-lookup"),
     (["--draft", "{other_vocab}"], "vocabulary differs from --checkpoint's"),
     (["--draft", "{seq2seq}"], "the draft must be a decoder-only"),
     (["--draft-tokens", "3"], "--draft-tokens: only with --draft"),
     (["--draft", "{draft}", "--draft-tokens", "0"], "--draft-tokens must be >= 1"),
     (["--draft", "{draft}", "--engine", "llama.cpp"], "--draft: attnkit's own")],
)  # fmt: skip
def test_refused_drafts_are_one_line_errors(runs, attnkit, extra, message):
    argv = [x.format(**runs) for x in extra]
    rc, out, err = attnkit(*base(runs, "--temperature", "0", "--no-echo", *argv))
    assert rc == 2 and out == "" and message in err and len(err.splitlines()) == 1
