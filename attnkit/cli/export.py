"""Export a checkpoint to run outside attnkit.

Targets (--to):
  hf           a Hugging Face directory (MarianMTModel, PreTrainedTokenizerFast,
               generation_config.json, README.md model card) that transformers
               loads with no attnkit installed; a token-classification or
               question-answering checkpoint (an encoder with a token-level head)
               as BertForTokenClassification / BertForQuestionAnswering
  onnx         encoder and decoder-with-past ONNX graphs (onnxruntime); decode them
               with python -m attnkit.engines.onnx_runner DIR
  ctranslate2  a CTranslate2 model directory, converted by CTranslate2's own
               TransformersConverter from the hf export
  gguf         one llama.cpp GGUF file (--out model.gguf) of a Llama-type decoder-only
               model with its byte-level BPE tokenizer and chat template, for llama.cpp,
               Ollama, LM Studio; --precision f32 (default), f16, q8_0, q4_0 or q4_1

hf, onnx and ctranslate2 take encoder-decoder Transformers (hf also the encoders
above), gguf Llama-type decoder-only models; a variant a target cannot express
(pre-LN, learned/relative/rotary positions, RMSNorm, SwiGLU, grouped-query
attention, ... for the first three; learned positions, LayerNorm, GELU, biases,
... for gguf) is a one-line error naming the config field. The exports need
pip install 'attnkit[export]' (transformers, onnx, onnxruntime, ctranslate2, gguf).

Examples:
  attnkit export --checkpoint runs/de_en --to hf --out exports/de_en_hf \\
      --metrics test_metrics.json
  attnkit export --checkpoint runs/ner --to hf --out exports/ner_hf
  attnkit export --checkpoint runs/de_en --to ctranslate2 --out exports/de_en_ct2
  attnkit export --checkpoint runs/de_en --to onnx --out exports/de_en_onnx
  attnkit export --checkpoint runs/smollm2 --to gguf --precision q8_0 --out smollm2.gguf
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from attnkit.cli.common import CHECKPOINT_HELP, named_checkpoint
from attnkit.errors import UsageError

# --to NAME -> "module:function(loaded: LoadedModel, out: Path, *, overwrite, **options)".
EXPORTERS: dict[str, str] = {
    "hf": "attnkit.interop.hf.export:export_hf",
    "onnx": "attnkit.interop.onnx.export:export_onnx",
    "ctranslate2": "attnkit.interop.ctranslate2.export:export_ctranslate2",
    "gguf": "attnkit.interop.gguf.export:export_gguf",
}
FILE_TARGETS = frozenset({"gguf"})  # --out names one file, not a directory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    parser.add_argument("--to", required=True, choices=sorted(EXPORTERS), help="target format")
    parser.add_argument("--out", required=True, help="directory to write (gguf: the file)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument(
        "--metrics",
        help="hf only: a JSON file from 'attnkit evaluate --json' for the model card "
        "(default: test_metrics.json beside the checkpoint, if any)",
    )
    parser.add_argument(
        "--quantization",
        help="ctranslate2 only: weight type (int8, int8_float32, float16, ...; default: float32)",
    )
    parser.add_argument(
        "--precision",
        choices=("f32", "f16", "q8_0", "q4_0", "q4_1"),
        help="gguf only: tensor type of the weight matrices (default: f32; norms stay f32); "
        "from a checkpoint imported with --keep-quantized, q4_0/q4_1 write its int4 blocks "
        "back byte for byte where the type holds them",
    )


def _options(args: argparse.Namespace) -> dict[str, object]:
    """Target-specific options; one given for another target is a usage error."""
    options: dict[str, object] = {}
    if args.metrics is not None:
        if args.to != "hf":
            raise UsageError("--metrics: only --to hf writes a model card")
        metrics = Path(args.metrics)
        if not metrics.is_file():
            found = "is not a regular file" if metrics.exists() else "file not found"
            raise UsageError(f"--metrics {metrics}: {found}")
        options["metrics"] = metrics
    if args.quantization is not None:
        if args.to != "ctranslate2":
            raise UsageError("--quantization: only --to ctranslate2 quantizes")
        options["quantization"] = args.quantization
    if args.precision is not None:
        if args.to != "gguf":
            raise UsageError("--precision: only --to gguf takes it (ctranslate2: --quantization)")
        options["precision"] = args.precision
    return options


def run(args: argparse.Namespace) -> int:
    from attnkit.checkpoints.loading import load_model
    from attnkit.cli.common import checkpoint_inputs
    from attnkit.output_paths import check_output_file, check_replaceable_dir

    out = Path(args.out)
    options = _options(args)
    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    checkpoints = checkpoint_inputs(args.checkpoint)  # nothing written inside: --out CKPT/hf
    inputs = [*checkpoints, *([args.metrics] if args.metrics else [])]
    if args.to in FILE_TARGETS:
        check_output_file(out, option="--out", inputs=inputs, checkpoints=checkpoints)
        if out.exists() and not args.overwrite:
            raise UsageError(f"--out {out}: already exists; pass --overwrite to replace it")
        options["inputs"] = tuple(inputs)
    else:
        check_replaceable_dir(out, overwrite=args.overwrite, inputs=inputs, checkpoints=checkpoints)
    loaded = load_model(args.checkpoint, "cpu")
    module, _, name = EXPORTERS[args.to].partition(":")
    exporter = getattr(importlib.import_module(module), name)
    exporter(loaded, out, overwrite=args.overwrite, **options)
    detail = f", {args.precision or 'f32'}" if args.to == "gguf" else ""
    print(f"exported {loaded.directory} to {out} ({args.to}{detail})")
    return 0
