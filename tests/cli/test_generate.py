"""`attnkit generate` on a tiny decoder-only checkpoint saved in tmp_path."""

from __future__ import annotations

import argparse

import pytest
import torch

from attnkit.checkpoints import checkpoint_dir, save_checkpoint
from attnkit.cli import generate as cli
from attnkit.data.tokenizers import CharTokenizer
from attnkit.decoding.generate import generate
from attnkit.errors import CheckpointError, UsageError
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig

TEXT = "to be or not to be, that is the question\n"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A run directory with one checkpoint of a random char-level model."""
    torch.manual_seed(0)
    tok = CharTokenizer.train([TEXT])
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=16,
        vocab_size=tok.vocab_size, dropout=0.0,
    )  # fmt: skip
    model = DecoderOnlyLM(config).eval()
    run = tmp_path_factory.mktemp("lm")
    save_checkpoint(
        checkpoint_dir(run, 5),
        model_state=model.state_dict(),
        config=config.to_dict(),
        tokenizer_json=tok.to_json(),
    )
    return run, model, tok


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def expected_text(model, tok, prompt: str, n: int, seed: int, **options) -> str:
    ids = torch.tensor([tok.encode(prompt)])
    out = generate(model, ids, n, generator=torch.Generator().manual_seed(seed), **options)
    return prompt + tok.decode(out[0, ids.size(1) :].tolist()) + "\n"


class Recorder:
    """A stdout that keeps every write (to see the text arrive piece by piece)."""

    def __init__(self):
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return len(s)

    def flush(self) -> None:
        pass


def test_generate_streams_the_sampled_continuation(checkpoint, monkeypatch):
    run, model, tok = checkpoint
    out = Recorder()
    monkeypatch.setattr("sys.stdout", out)
    args = parse("--checkpoint", str(run), "--prompt", "to be", "--max-new-tokens", "30",
                 "--top-k", "5", "--seed", "3", "--device", "cpu")  # fmt: skip
    assert cli.run(args) == 0
    text = "".join(out.writes)
    assert text == expected_text(model, tok, "to be", 30, 3, top_k=5)
    assert len(out.writes) > 10  # written as generated, not all at the end (no empty writes)


def test_same_seed_same_text_greedy_is_deterministic(checkpoint, capsys):
    run, model, tok = checkpoint
    step = str(checkpoint_dir(run, 5))  # a checkpoint directory works too

    def text(*extra):
        assert cli.run(parse("--checkpoint", step, "--max-new-tokens", "40", *extra)) == 0
        return capsys.readouterr().out

    assert text("--seed", "1") == text("--seed", "1")
    assert text("--seed", "1") != text("--seed", "2")
    greedy = text("--temperature", "0", "--prompt", "not", "--no-echo")
    assert greedy == expected_text(model, tok, "not", 40, 0, temperature=0.0)[3:]


@pytest.mark.parametrize(
    ("argv", "option"),
    [(["--top-p", "0"], "--top-p"), (["--top-k", "-1"], "--top-k"),
     (["--temperature", "-0.5"], "--temperature"), (["--max-new-tokens", "-1"], "--max-new-tokens"),
     (["--prompt", ""], "--prompt")],
)  # fmt: skip
def test_bad_options_are_one_line_usage_errors(checkpoint, argv, option):
    run, _, _ = checkpoint
    with pytest.raises(UsageError) as err:
        cli.run(parse("--checkpoint", str(run), *argv))
    assert str(err.value).startswith(option) and "\n" not in str(err.value)


def test_missing_or_foreign_checkpoints_are_refused(checkpoint, tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        cli.run(parse("--checkpoint", str(tmp_path / "nope")))
    run, model, tok = checkpoint
    save_checkpoint(
        tmp_path / "mt",
        model_state=model.state_dict(),
        config={"family": "transformer", "d_model": 32},
        tokenizer_json=tok.to_json(),
    )
    with pytest.raises(CheckpointError, match="this is a transformer checkpoint"):
        cli.run(parse("--checkpoint", str(tmp_path / "mt")))


def test_through_the_attnkit_command(checkpoint, monkeypatch, capsys):
    from attnkit.cli import main as cli_main

    commands = {**cli_main.COMMANDS, "generate": ("attnkit.cli.generate", "generate text")}
    monkeypatch.setattr(cli_main, "COMMANDS", commands)
    run, _, _ = checkpoint
    assert cli_main.main(["generate", "--checkpoint", str(run), "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("\n")
    assert cli_main.main(["generate", "--checkpoint", str(run), "--top-p", "2"]) == 2
    err = capsys.readouterr().err
    assert err == "attnkit generate: error: --top-p must be in (0, 1], got 2.0\n"


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_precision_reaches_generate(checkpoint, capsys, monkeypatch, precision):
    """--precision converts the model (quantize_model) before it generates; fp32
    (packed) gives the plain model's greedy text; int8 is calibrated (SmoothQuant)
    on text through the model's tokenizer, and every linear it converts is smoothed."""
    import attnkit.quantize as quantize
    from attnkit.quantize import Int8Linear

    run, model, tok = checkpoint
    seen, converted = [], []

    def spy(m, p, **kw):
        seen.append((p, kw.get("calibrate") is not None))
        converted.append(real(m, p, **kw))
        return converted[-1]

    real = quantize.quantize_model
    monkeypatch.setattr(quantize, "quantize_model", spy)
    argv = ["--checkpoint", str(run), "--max-new-tokens", "20", "--temperature", "0"]
    assert cli.run(parse(*argv, "--prompt", "not", "--no-echo", "--precision", precision)) == 0
    text = capsys.readouterr().out
    assert seen == [(precision, precision == "int8")] and text.endswith("\n")
    if precision == "int8":
        int8 = [m for m in converted[0].modules() if isinstance(m, Int8Linear)]
        assert int8 and all(m.extra_repr().endswith("smoothed") for m in int8)
    if precision == "fp32":
        assert text == expected_text(model, tok, "not", 20, 0, temperature=0.0)[3:]


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_compile_takes_a_precision(checkpoint, capsys, monkeypatch, precision):
    """--compile --precision P: the precision's linears on the compiled static-cache step
    (torch.compile replaced by a spy that runs the step eagerly: no compile here;
    tests/decoding/test_compiled_precisions.py compiles)."""
    from attnkit.decoding import static
    from attnkit.quantize import Int4Linear, Int8Linear

    compiled: list[dict] = []

    def spy(fn, **kwargs):
        compiled.append(kwargs)
        return fn

    monkeypatch.setattr(torch, "compile", spy)
    run, _, _ = checkpoint
    argv = ["--checkpoint", str(run), "--max-new-tokens", "6", "--temperature", "0",
            "--precision", precision, "--compile", "--no-echo", "--ignore-eos"]  # fmt: skip
    seen: list[object] = []
    real = static.StaticCacheStepper.step

    def step(self, tokens, state):
        seen.append(self.model)
        return real(self, tokens, state)

    monkeypatch.setattr(static.StaticCacheStepper, "step", step)
    assert cli.run(parse(*argv)) == 0
    assert capsys.readouterr().out.endswith("\n") and len(seen) == 6
    options = static.FROZEN_MODES[static.FROZEN_TUNED]  # the CPU plan's compiled mode
    assert compiled == [{"fullgraph": True, "dynamic": False, "options": options}]
    assert options["cpp_wrapper"] and options["freezing"] and options["max_autotune"]
    kind = Int8Linear if precision == "int8" else Int4Linear
    assert any(isinstance(m, kind) for m in seen[0].modules())  # type: ignore[attr-defined]


class _Bytes:
    """A byte-level tokenizer (id = byte), recording how many ids each decode is given."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def decode(self, ids) -> str:
        self.sizes.append(len(ids))
        return bytes(ids).decode("utf-8", errors="replace")


def test_the_streamed_text_is_the_whole_decode_at_a_bounded_cost_per_token():
    """generate printed by decoding every id so far at each step: time and memory grew
    with the text (--max-new-tokens 10**12 never got far). Now a short window is decoded,
    and the pieces still add up to the decode of the whole, multi-byte characters split
    across tokens included."""
    from attnkit.cli.generate import IncrementalText

    text = "to be, or not to be: ça, 東京, 🙂 " * 300
    ids = list(text.encode("utf-8"))
    tok = _Bytes()
    stream = IncrementalText(tok, ids[:7])
    pieces = [stream.add(i) for i in ids[7:]]
    pieces.append(stream.finish())
    assert "".join(pieces) == text[len(bytes(ids[:7]).decode()) :]
    assert max(tok.sizes) <= IncrementalText.CONTEXT + IncrementalText.MAX_WAIT + 1
    assert len(stream.ids) <= IncrementalText.CONTEXT + IncrementalText.MAX_WAIT + 1
    # A model that draws only half characters still prints, at least every MAX_WAIT tokens.
    stream = IncrementalText(tok, [65])
    garbage = [stream.add(0xE6) for _ in range(100)]
    assert sum(1 for piece in garbage if piece) >= 100 // IncrementalText.MAX_WAIT
