"""Issue 42's sizes and learned-nothing cases through the real CLI (a subprocess under a
6 GiB address-space limit): one stderr line or two, exit 1 or 2, no traceback.

* sizes estimated before allocating: a LoRA rank of 3,000,000 or 2**62, a
  tokenizer.json whose added ids are near 10**9 or past its size;
* runs that learned nothing: ``--init`` weights holding NaN are refused at load;
  a run whose every update is skipped (``train.lora.alpha: 1e308``, weights near
  float32's maximum) exits 1 without a checkpoint;
* a classifier label holding a TAB is refused naming the file and line.

Refused commands change nothing on disk (``snapshot``: every file's bytes and
mtime, the run lock's included). Every JSON line the commands print is parsed
strictly (``reliability_helpers.cli``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from reliability_helpers import cli, snapshot

from attnkit.checkpoints import save_checkpoint
from attnkit.data.tokenizers import CharTokenizer
from attnkit.models import EncoderOnlyConfig, EncoderOnlyModel

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: lora_helpers
from lora_helpers import TEXT, char_tokenizer, tiny_lm  # noqa: E402


def _base(directory: Path, fill: float | None = None) -> Path:
    model = tiny_lm()
    if fill is not None:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(fill)
    save_checkpoint(directory, model_state=model.state_dict(), config=model.config.to_dict(),
                    tokenizer_json=char_tokenizer().to_json())  # fmt: skip
    return directory


def _lm_config(tmp: Path, name: str, *, lora: dict | None = None, **extra) -> Path:
    (tmp / "text.txt").write_text(TEXT * 20, encoding="utf-8")
    train = {"max_tokens": 64, "schedule": "constant", "lr": 1e-2, "warmup_steps": 0,
             "log_every": 1, "eval_every": 100, "eval_blocks": 2, "save_every": 0,
             "max_steps": 3, "seed": 3, "cpu_matmul": "mkl"}  # fmt: skip
    if lora is not None:
        train["lora"] = {"rank": 4, "alpha": 8, "targets": ["q", "v"], **lora}
    config = {"task": "lm", "data": {"dir": str(tmp), "text": "text.txt", "block_size": 16},
              "train": train, **extra}  # fmt: skip
    path = tmp / name
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _hf_tokenizer(tmp: Path, added_ids: list[int]) -> Path:
    import tokenizers as tk

    vocab = {c: i for i, c in enumerate(sorted(set(TEXT)))}
    vocab |= {"<s>": len(vocab), "</s>": len(vocab) + 1, "<unk>": len(vocab) + 2}
    hf = tk.Tokenizer(tk.models.WordLevel(vocab, unk_token="<unk>"))
    hf.pre_tokenizer = tk.pre_tokenizers.Split("", "isolated")
    data = json.loads(hf.to_str())
    data["added_tokens"] = [{"id": i, "content": f"<x{n}>", "single_word": False,
                             "lstrip": False, "rstrip": False, "normalized": False,
                             "special": True} for n, i in enumerate(added_ids)]  # fmt: skip
    path = tmp / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _encoder(directory: Path) -> Path:
    tok = CharTokenizer.train(["the cat sat on the mat. a dog on the log."])
    config = EncoderOnlyConfig(d_model=32, num_heads=4, d_ff=64, num_layers=1, max_len=48,
                               vocab_size=tok.vocab_size + 1, mask_id=tok.vocab_size,
                               dropout=0.0)  # fmt: skip
    save_checkpoint(directory, model_state=EncoderOnlyModel(config).state_dict(),
                    config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    return directory


def _train(tmp: Path, config: Path, *extra: str) -> list[str]:
    return ["train", "--config", str(config), "--out", str(tmp / "out"), "--no-progress", *extra]


# id -> (argv builder, exit code, what stderr's error line must say)
Case = tuple[Callable[[Path], list[str]], int, str]
REFUSED: dict[str, Case] = {
    "lora-rank-3e6": (
        lambda t: _train(t, _lm_config(t, "r.yaml", lora={"rank": 3_000_000}),
                         "--init", str(_base(t / "base"))),
        2, "train.lora.rank: 3000000 is more than layers.0.self_attn.qkv_proj (v) allows",
    ),
    "lora-rank-2**62": (
        lambda t: _train(t, _lm_config(t, "r.yaml", lora={"rank": 2**62}),
                         "--init", str(_base(t / "base"))),
        2, f"train.lora.rank: {2**62} is more than",
    ),
    "tokenizer-ids-near-1e9": (
        lambda t: _train(t, _lm_config(t, "t.yaml", tokenizer={
            "path": str(_hf_tokenizer(t, [10**9 + i for i in range(4)]))})),
        1, "tokenizer.json: added token '<x0>' has id 1000000000, but the file defines",
    ),
    "tokenizer-id-70000": (
        lambda t: _train(t, _lm_config(t, "t.yaml", tokenizer={
            "path": str(_hf_tokenizer(t, [70_000]))})),
        1, "tokenizer.json: added token '<x0>' has id 70000",
    ),
    "init-all-nan": (
        lambda t: _train(t, _lm_config(t, "n.yaml"), "--init",
                         str(_base(t / "nan", float("nan")))),
        1, "model.safetensors: tensor ",
    ),
    "label-with-a-tab": (
        lambda t: _train(t, _classifier_config(t), "--init", str(_encoder(t / "encoder"))),
        1, "train.jsonl:2: label 'pos\\tneg' holds the control character '\\t'",
    ),
}  # fmt: skip


def _classifier_config(tmp: Path) -> Path:
    records = [{"label": "pos", "text": "the cat sat"}, {"label": "pos\tneg", "text": "a dog"}]
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = {"task": "text_classification",
              "data": {"dir": str(tmp), "train": "train.jsonl", "valid": None},
              "train": {"max_steps": 1, "batch_size": 2}}  # fmt: skip
    path = tmp / "c.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_in_one_line_before_allocating_and_nothing_changes(tmp_path, case):
    build, code, message = REFUSED[case]
    argv = build(tmp_path)
    before = snapshot(tmp_path)
    result = cli(*argv, cwd=tmp_path)
    err = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(err) == 1 and "Traceback" not in result.stderr, result.stderr
    assert message in err[0], err[0]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "how",
    [{"lora": {"alpha": 1e308}}, {"fill": 3.0e38}],
    ids=["lora-alpha-1e308", "init-near-float32-max"],
)
def test_a_run_whose_every_update_was_skipped_exits_1_without_a_checkpoint(tmp_path, how):
    base = _base(tmp_path / "base", how.get("fill"))
    config = _lm_config(tmp_path, "a.yaml", lora=how.get("lora"))
    result = cli(*_train(tmp_path, config, "--init", str(base)), cwd=tmp_path)
    err = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert len(err) <= 3 and "Traceback" not in result.stderr, result.stderr
    assert err[-1].startswith("attnkit train: error: all 3 updates of this run were skipped")
    assert not (tmp_path / "out" / "checkpoints").exists()
    assert '"loss"' not in result.stdout  # no success summary
    # its log is strict JSON (NaN losses as null, the reason beside them)
    for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=pytest.fail)
