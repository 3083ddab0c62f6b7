"""The ``README.md`` model card of an ``attnkit export --to hf`` directory.

What it says comes from the checkpoint and the files of its run, and
nothing is guessed: a fact the files do not hold is written as unknown.

* architecture: the checkpoint's ``config.json``;
* data and training: the run's ``run.json`` (or the copy inside the
  checkpoint's ``trainer_state.json``), the step from ``trainer_state.json``;
* scores: a JSON file from ``attnkit evaluate --json`` (``--metrics``, or a
  ``test_metrics.json`` beside the checkpoint or in its run), with the
  sacreBLEU signatures it holds; the last validation scores from the run's
  ``metrics.jsonl``.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from attnkit import __version__, jsonio
from attnkit.checkpoints.loading import LoadedModel
from attnkit.errors import AttnkitError, UsageError

METRICS_FILE = "test_metrics.json"
RUN_FILE = "attnkit_run.json"  # the run config, copied into the export beside the card
_JSON_LIMIT = 16 << 20


def _read_json(path: Path) -> Any:
    from attnkit.checkpoints.safe_files import read_json

    return read_json(path, _JSON_LIMIT)


def _run_dirs(checkpoint: Path) -> list[Path]:
    """The checkpoint directory, then the directories a run may hold it in."""
    dirs = [checkpoint, checkpoint.parent]
    if checkpoint.parent.name == "checkpoints":
        dirs.append(checkpoint.parent.parent)
    return dirs


def _first_existing(dirs: list[Path], name: str) -> Path | None:
    return next((d / name for d in dirs if (d / name).is_file()), None)


def run_config(loaded: LoadedModel) -> dict[str, object] | None:
    """The run config of ``loaded``'s run (``run.json`` or the trainer state's copy), if any."""
    return _run_config(loaded)[0]


def _run_config(loaded: LoadedModel) -> tuple[dict[str, object] | None, int | None, str]:
    """``(run config, step, where it came from)``, each possibly unknown."""
    dirs = _run_dirs(loaded.directory)
    step = None
    run: dict[str, object] | None = None
    source = "unknown"
    state_file = loaded.directory / "trainer_state.json"
    if state_file.is_file():
        try:
            state = _read_json(state_file)
            step = state.get("step") if isinstance(state.get("step"), int) else None
            if isinstance(state.get("run"), dict):
                run, source = state["run"], str(state_file)
        except (AttnkitError, AttributeError):
            pass
    run_file = _first_existing(dirs[1:], "run.json")
    if run_file is not None:
        try:
            run, source = _read_json(run_file), str(run_file)
        except AttnkitError:
            pass
    return run, step, source


def _metrics(loaded: LoadedModel, metrics: Path | None) -> tuple[dict[str, object] | None, str]:
    if metrics is None:
        metrics = _first_existing(_run_dirs(loaded.directory), METRICS_FILE)
        if metrics is None:
            return None, ""
    try:
        data = _read_json(metrics)
    except AttnkitError as e:
        raise UsageError(f"--metrics: {e}") from None
    if not isinstance(data, dict) or "bleu" not in data:
        raise UsageError(f"--metrics {metrics}: not the output of 'attnkit evaluate --json'")
    return data, str(metrics)


def _last_valid(loaded: LoadedModel) -> dict[str, object] | None:
    log = _first_existing(_run_dirs(loaded.directory)[1:], "metrics.jsonl")
    if log is None:
        return None
    last = None
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("split") == "valid":
            last = record
    return last


def _architecture(loaded: LoadedModel, hf: Any) -> list[str]:
    c = loaded.config
    params = sum(p.numel() for p in loaded.model.parameters())
    return [
        "| field | value |",
        "|---|---|",
        "| family | encoder-decoder Transformer (exported as `MarianMTModel`) |",
        f"| layers | {c.num_encoder_layers} encoder, {c.num_decoder_layers} decoder |",
        f"| d_model / heads / d_ff | {c.d_model} / {c.num_heads} / {c.d_ff} |",
        f"| activation | {c.activation} |",
        f"| norm | post-LN LayerNorm (eps {c.norm_eps}) |",
        "| positions | fixed sinusoids (Marian's sin-then-cos layout; dimensions permuted) |",
        f"| embeddings | shared: {c.share_embeddings}; scaled by sqrt(d_model): "
        f"{c.scale_embeddings} |",
        f"| vocabulary | {c.tgt_vocab_size} (pad {hf.config.pad_token_id}, "
        f"start/BOS {hf.config.decoder_start_token_id}, EOS {hf.config.eos_token_id}) |",
        f"| parameters | {params / 1e6:.2f}M |",
        f"| max positions | {c.max_len} |",
    ]


def _data_and_training(run: dict[str, Any] | None, step: int | None, source: str) -> list[str]:
    if run is None:
        return ["Unknown: the checkpoint's run left no `run.json` or trainer state."]
    data = run.get("data") or {}
    lines = [
        f"- task: {run.get('task', 'unknown')}; data directory `{data.get('dir', 'unknown')}`, "
        f"{data.get('src_lang', '?')} -> {data.get('tgt_lang', '?')}, splits "
        f"train `{data.get('train', '?')}`, valid `{data.get('valid', '?')}`, "
        f"test `{data.get('test', 'unknown')}`",
        f"- tokenizer: {jsonio.dumps(run.get('tokenizer'))}",
        f"- training steps: {step if step is not None else 'unknown'}",
        f"- run config from `{source}`, copied here as `{RUN_FILE}`; to train again: "
        f"`attnkit train --config {RUN_FILE} --out RUN`",
        "",
        "```json",
        jsonio.dumps(run, indent=2),
        "```",
    ]
    return lines


def _scores(metrics: dict[str, Any] | None, where: str, valid: dict[str, Any] | None) -> list[str]:
    lines = []
    if metrics is None:
        lines.append(
            "Test scores: unknown (not given at export time; run `attnkit evaluate --checkpoint "
            "RUN --src TEST.src --ref TEST.ref --json > test_metrics.json` and export with "
            "`--metrics test_metrics.json`)."
        )
    else:
        decode = metrics.get("decode", {})
        lines += [
            f"From `{where}` (attnkit, {metrics.get('sentences', '?')} sentences, "
            f"beam {decode.get('beam', '?')}, alpha {decode.get('alpha', '?')}):",
            "",
            f"- BLEU {metrics['bleu']:.2f} (`{metrics.get('bleu_signature', 'unknown')}`)",
        ]
        if "chrf" in metrics:
            lines.append(
                f"- chrF {metrics['chrf']:.2f} (`{metrics.get('chrf_signature', 'unknown')}`)"
            )
    if valid is not None:
        shown = {k: v for k, v in valid.items() if k not in ("split",)}
        lines += ["", f"Last validation record of the run: `{jsonio.dumps(shown)}`"]
    return lines


def model_card(loaded: LoadedModel, hf: object, *, metrics: Path | None = None) -> str:
    """The README.md text for the export of ``loaded`` (``hf``: the exported model)."""
    run, step, source = _run_config(loaded)
    scores, where = _metrics(loaded, metrics)
    today = datetime.date.today().isoformat()
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: translation",
        "tags: [attnkit, marian]",
        "---",
        "",
        "# attnkit Transformer, exported to transformers",
        "",
        f"Exported by attnkit {__version__} on {today} from `{loaded.directory}`.",
        "",
        "## Architecture",
        "",
        *_architecture(loaded, hf),
        "",
        "## Data and training",
        "",
        *_data_and_training(run, step, source),
        "",
        "## Scores",
        "",
        *_scores(scores, where, _last_valid(loaded)),
        "",
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
        "tok = AutoTokenizer.from_pretrained(DIR)",
        "model = AutoModelForSeq2SeqLM.from_pretrained(DIR)",
        'batch = tok(["..."], return_tensors="pt", padding=True)',
        "out = model.generate(**batch)  # beam 4 as in generation_config.json",
        "print(tok.batch_decode(out, skip_special_tokens=True))",
        "```",
        "",
        "## Differences from `attnkit translate`",
        "",
        "- Greedy search (`num_beams=1`) gives the same outputs.",
        "- Beam search: transformers divides a hypothesis' log-probability by "
        "`len ** length_penalty`; attnkit by GNMT's `((5 + len) / 6) ** alpha`. With "
        "`length_penalty=0` and attnkit's `--alpha 0` the searches are the same; with "
        "`alpha > 0` a few outputs may differ.",
        "- Length: attnkit stops each output at source length + 50 tokens; here "
        "`max_length` is the model's positions.",
        "",
    ]
    return "\n".join(lines)
