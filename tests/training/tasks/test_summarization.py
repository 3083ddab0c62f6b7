"""task: summarization end to end on tiny models: train, summarize, evaluate (ROUGE)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from chat_helpers import chatml_tokenizer

from attnkit.checkpoints import save_checkpoint
from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.decoding.summaries import summarize_texts
from attnkit.errors import ConfigError
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import SummarizationLMTask, SummarizationTask, task_from_run

WORDS = ["gas", "power", "meeting", "contract", "report", "lunch"]

CONFIG = """
task: summarization
data: {{dir: {dir}, train: train.jsonl, valid: valid.jsonl, max_len: 24}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 16, num_heads: 2, d_ff: 32,
        num_encoder_layers: 1, num_decoder_layers: 1, max_len: 32}}
train: {{max_steps: 3, max_tokens: 400, warmup_steps: 1, log_every: 1000,
        eval_every: 100000, save_every: 3, valid_bleu_sentences: 4, cpu_matmul: mkl}}
"""


def _write(directory: Path, n: int) -> list[dict[str, str]]:
    rows = [{"text": f"about the {w}: please see the {w} notes below, thanks " * 2, "summary": w,
             "id": str(i)} for i, w in enumerate(WORDS * (n // len(WORDS)))]  # fmt: skip
    for name, part in (("train.jsonl", rows), ("valid.jsonl", rows[:6])):
        (directory / name).write_text("".join(json.dumps(r) + "\n" for r in part))
    return rows


def test_texts_longer_than_max_len_are_cut_not_dropped(tmp_path):
    _write(tmp_path, 12)
    task = task_from_run(RunConfig.from_dict(yaml.safe_load(CONFIG.format(dir=tmp_path))))
    assert isinstance(task, SummarizationTask)
    assert task.data.num_kept == 12  # every text is ~100 characters, max_len 24
    assert task.data.longest_src == 24


@pytest.mark.slow
def test_train_summarize_evaluate_encoder_decoder(tmp_path, capsys):
    _write(tmp_path, 24)
    config = tmp_path / "tiny.yaml"
    config.write_text(CONFIG.format(dir=tmp_path))
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"rouge1", "rouge2", "rougeL", "loss"} <= set(summary["valid"])
    args = ["summarize", "--checkpoint", str(out), "--input", str(tmp_path / "valid.jsonl")]
    assert main([*args, "--json", "--greedy", "--max-tokens", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and all(set(json.loads(x)) == {"summary"} for x in lines)
    loaded = load_model(out, "cpu")
    texts = [json.loads(x)["text"] for x in (tmp_path / "valid.jsonl").read_text().splitlines()]
    want = summarize_texts(loaded.model, loaded.tokenizer, texts, beam=1, max_tokens=6)
    assert [json.loads(x)["summary"] for x in lines] == want
    # prompt lookup (drafts from the text, greedy): greedy search's summaries
    assert main([*args, "--json", "--prompt-lookup", "5", "--max-tokens", "6"]) == 0
    assert capsys.readouterr().out.splitlines() == lines
    labelled = str(tmp_path / "valid.jsonl")
    assert main(["evaluate", "--checkpoint", str(out), "--labelled", labelled, "--json",
                 "--greedy"]) == 0  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert {"rouge1", "rouge2", "rougeL"} <= set(result) and result["examples"] == 6
    assert all(0.0 <= result[k] <= 100.0 for k in ("rouge1", "rouge2", "rougeL"))


def _decoder_only(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    tok = chatml_tokenizer()
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=256,
        vocab_size=tok.vocab_size, pad_id=0, bos_id=1, eos_id=2, dropout=0.0,
    )  # fmt: skip
    out = tmp_path / "lm"
    save_checkpoint(out, model_state=DecoderOnlyLM(config).state_dict(),
                    config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    return out


def test_decoder_only_is_instruction_tuned_and_summarizes(tmp_path, capsys):
    _write(tmp_path, 12)
    lm = _decoder_only(tmp_path)
    config = tmp_path / "lm.yaml"
    config.write_text(
        f"task: summarization\ndata: {{dir: {tmp_path}, train: train.jsonl, valid: valid.jsonl,"
        " block_size: 160}\ntrain: {max_steps: 2, max_tokens: 320, eval_every: 100000, "
        "save_every: 2, valid_bleu_sentences: 2, eval_blocks: 4, log_every: 1000, "
        "cpu_matmul: mkl}\n"
    )
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--init", str(lm), "--out", str(out),
                 "--no-progress"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"rouge1", "rouge2", "rougeL", "loss"} <= set(summary["valid"])
    docs = tmp_path / "docs.txt"
    docs.write_text("the gas report is late\n\nlunch at noon?\n")
    assert main(["summarize", "--checkpoint", str(out), "--input", str(docs),
                 "--max-tokens", "4"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.split("\n")[:-1]
    loaded = load_model(out, "cpu")
    want = summarize_texts(loaded.model, loaded.tokenizer, docs.read_text().splitlines(),
                           beam=1, max_tokens=4)  # fmt: skip
    assert lines == want and want[1] == ""  # a blank line has an empty summary


def test_decoder_only_task_needs_init_and_is_instruction_tuning(tmp_path):
    _write(tmp_path, 6)
    text = (
        f"task: summarization\nmodel: {{family: decoder_only}}\n"
        f"data: {{dir: {tmp_path}, train: train.jsonl, valid: null, block_size: 160}}\n"
    )
    run = RunConfig.from_dict(yaml.safe_load(text))  # fmt: skip
    with pytest.raises(ConfigError, match="start from it with --init"):
        task_from_run(run)
    tok = chatml_tokenizer()
    task = task_from_run(run, tok)  # a resumed run's tokenizer
    assert isinstance(task, SummarizationLMTask)
    sequence = task.train_set.sequences[0]
    answer = [i for i, scored in zip(sequence.ids, sequence.scored) if scored]
    assert tok.decode(answer).startswith(WORDS[0])  # the summary is the answer


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    lm = _decoder_only(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine", "summary": "ok"}\n{"text": "no summary"}\n')
    assert main(["evaluate", "--checkpoint", str(lm), "--labelled", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err == f'attnkit evaluate: error: {bad}:2: "summary" must be a string, got missing\n'
    bad.write_text('{"text": 5}\n')
    assert main(["summarize", "--checkpoint", str(lm), "--input", str(bad)]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["summarize", "--checkpoint", str(lm), "--input", str(tmp_path / "nope")]) == 1
    assert "nope: file not found" in capsys.readouterr().err
    assert main(["summarize", "--checkpoint", str(lm), "--max-tokens", "0"]) == 2
    assert "--max-tokens must be >= 1" in capsys.readouterr().err
    assert main(["summarize", "--checkpoint", str(lm), "--prompt-lookup", "-1"]) == 2
    assert "--prompt-lookup must be >= 0" in capsys.readouterr().err
