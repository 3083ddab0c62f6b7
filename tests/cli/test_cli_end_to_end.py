"""The CLI end to end on tiny data: train, translate, evaluate, attention, average."""

import json
import warnings

import pytest
import torch

from attnkit import checkpoints as ckpt
from attnkit.cli.main import main
from attnkit.data.synthetic import number_splits

CONFIG = """
task: translation
data: {{dir: {dir}, src_lang: en, tgt_lang: de, train: train, valid: valid, max_len: 96}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64,
        num_encoder_layers: 1, num_decoder_layers: 1, max_len: 128}}
train: {{max_steps: 6, max_tokens: 800, warmup_steps: 2, log_every: 2, eval_every: 3,
        save_every: 2, keep_last: 3, valid_bleu_sentences: 4}}
decode: {{beam: 2}}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny training run shared by the tests below."""
    root = tmp_path_factory.mktemp("cli")
    splits = number_splits(120, 8, 6, low=1, high=999, seed=0)
    for split, pairs in splits.items():
        (root / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (root / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    config = root / "tiny.yaml"
    config.write_text(CONFIG.format(dir=root), encoding="utf-8")
    out = root / "run"
    code = main(["train", "--config", str(config), "--out", str(out), "--no-progress"])
    assert code == 0
    return root, out


def test_train_writes_checkpoints_metrics_and_curve(trained):
    _, out = trained
    steps = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
    assert steps == ["step_00000002", "step_00000004", "step_00000006"]
    for name in ("model.safetensors", "config.json", "tokenizer.json", "trainer_state.json"):
        assert (out / "checkpoints" / steps[-1] / name).is_file()
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "valid"] == [3, 6]
    assert (out / "loss.png").is_file() and (out / "run.json").is_file()


def test_train_refuses_to_overwrite_an_existing_run(trained, capsys):
    root, out = trained
    before = sorted(p.name for p in (out / "checkpoints").iterdir())
    code = main(["train", "--config", str(root / "tiny.yaml"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert "--resume" in err and "--overwrite" in err and str(out) in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == before


def test_translate_writes_one_line_per_input_line(trained, tmp_path, capsys):
    root, out = trained
    src = tmp_path / "in.txt"
    src.write_text("one hundred\n\nforty-two\n", encoding="utf-8")
    for extra in ([], ["--greedy"], ["--sample", "--seed", "3", "--top-k", "5"]):
        assert main(["translate", "--checkpoint", str(out), "--input", str(src), *extra]) == 0
        lines = capsys.readouterr().out.split("\n")
        assert len(lines) == 4 and lines[-1] == ""  # three lines, newline-terminated
    assert main(["translate", "--checkpoint", str(out), "--input", str(src), "--nbest", "2"]) == 0
    assert all(line.count("\t") == 1 for line in capsys.readouterr().out.splitlines())


def test_evaluate_prints_scores_as_json(trained, capsys):
    root, out = trained
    args = ["evaluate", "--checkpoint", str(out), "--src", str(root / "test.en"),
            "--ref", str(root / "test.de"), "--json"]  # fmt: skip
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"bleu", "chrf", "bleu_lc", "perplexity", "bleu_signature"} <= result.keys()
    assert result["sentences"] == 6 and result["perplexity"] > 1.0


def test_attention_draws_a_png(trained, tmp_path):
    _, out = trained
    png = tmp_path / "map.png"
    assert main(["attention", "--checkpoint", str(out), "--text", "one hundred",
                 "--out", str(png), "--head", "1"]) == 0  # fmt: skip
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_average_gives_the_mean_of_the_checkpoints(trained, tmp_path):
    _, out = trained
    avg = tmp_path / "avg"
    assert main(["average", "--run", str(out), "--last", "2", "--out", str(avg)]) == 0
    dirs = sorted((out / "checkpoints").glob("step_*"))[-2:]
    a, b = (ckpt.load_checkpoint(d).model_state for d in dirs)
    got = ckpt.load_checkpoint(avg).model_state
    key = "encoder.layers.0.ffn.w1.weight"
    torch.testing.assert_close(got[key], (a[key] + b[key]) / 2)
    assert not torch.equal(a[key], b[key])  # the check above is not trivially true


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["translate", "--checkpoint", "{out}", "--beam", "0"], "--beam"),
        (
            ["translate", "--checkpoint", "{out}", "--sample", "--temperature", "-1"],
            "--temperature",
        ),
        (["translate", "--checkpoint", "{out}", "--sample", "--top-p", "1.5"], "--top-p"),
        (["translate", "--checkpoint", "{root}/nope"], "nope"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_code(trained, capsys, argv, needle):
    root, out = trained
    argv = [a.format(out=out, root=root) for a in argv]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code in (1, 2)
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err


def test_no_fast_turns_every_speed_switch_off_even_over_a_set(trained):
    root, _ = trained
    out = root / "no_fast"
    code = main(["train", "--config", str(root / "tiny.yaml"), "--out", str(out), "--no-progress",
                 "--set", "train.max_steps=1", "--set", "train.fast=on",
                 "--set", "train.compile=true", "--no-fast"])  # fmt: skip
    assert code == 0
    saved = json.loads((out / "run.json").read_text())["train"]
    assert (saved["fast"], saved["compile"]) == ("off", False)


def test_translate_gives_the_same_lines_on_every_decode_path(trained, capsys, monkeypatch):
    # --compile compiles for real (inductor's C++ code: ~20 s on 2 cores).
    from attnkit.decoding.static import StaticCacheStepper
    from attnkit.quantize import PackedLinear

    root, out = trained
    base = ["translate", "--checkpoint", str(out), "--input", str(root / "test.en"), "--beam", "2"]
    static_steps = []
    real_step = StaticCacheStepper.step
    monkeypatch.setattr(
        StaticCacheStepper,
        "step",
        lambda self, tokens, state: (
            static_steps.append(type(state.cache).__name__) or real_step(self, tokens, state)
        ),
    )
    compiled = []
    real_compile = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda fn, **kw: compiled.append(fn.__name__) or real_compile(fn, **kw)
    )
    packed = []
    real_packed = PackedLinear.forward
    monkeypatch.setattr(
        PackedLinear, "forward", lambda self, x: packed.append(1) or real_packed(self, x)
    )
    outputs = {}
    for flag in ("", "--no-fast", "--compile"):
        static_steps.clear()
        packed.clear()
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*compiled decode step")  # no fallback
            assert main(base + ([flag] if flag else [])) == 0
        outputs[flag] = capsys.readouterr().out
        # Which cache decoded: on the CPU the static one only when compiled, the
        # model's own otherwise; the fast path's linears are oneDNN-packed fp32.
        assert set(static_steps) == ({"StaticKVCache"} if flag == "--compile" else set()), flag
        assert bool(packed) == (flag == ""), flag
    assert outputs[""] == outputs["--no-fast"] == outputs["--compile"]
    assert len(outputs[""].splitlines()) == 6
    assert compiled == ["_static_logits"]  # --compile compiled the decode step


def test_an_empty_or_blank_line_translates_to_an_empty_line(trained, tmp_path, capsys):
    root, out = trained
    src = tmp_path / "in.txt"
    src.write_text("one hundred\n\n   \nseven\n", encoding="utf-8")
    assert main(["translate", "--checkpoint", str(out), "--input", str(src)]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[1] == "" and lines[2] == "" and lines[0] and lines[3]


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_precision_reaches_translate_evaluate_and_attention(trained, tmp_path, capsys, precision):
    from attnkit.quantize import Int8Linear, PackedLinear

    root, out = trained
    kind = Int8Linear if precision == "int8" else PackedLinear
    calls = []
    real = kind.forward
    kind.forward = lambda self, x: calls.append(1) or real(self, x)  # type: ignore[method-assign]
    try:
        src = ["--checkpoint", str(out), "--precision", precision]
        assert main(["translate", *src, "--input", str(root / "test.en")]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 6 and calls
        calls.clear()
        assert main(["evaluate", *src, "--src", str(root / "test.en"),
                     "--ref", str(root / "test.de"), "--json"]) == 0  # fmt: skip
        result = json.loads(capsys.readouterr().out)
        assert result["decode"]["precision"] == precision and calls
        calls.clear()
        png = tmp_path / "a.png"
        assert main(["attention", *src, "--text", "one hundred", "--out", str(png)]) == 0
        assert png.read_bytes()[:4] == b"\x89PNG" and calls
    finally:
        kind.forward = real  # type: ignore[method-assign]


def test_a_bad_precision_is_one_line(trained, capsys):
    _, out = trained
    with pytest.raises(SystemExit) as exit_:
        main(["translate", "--checkpoint", str(out), "--precision", "int3"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--precision" in err and "int3" in err
    assert len(err.strip().splitlines()) == 1
