"""Export a checkpoint to run outside attnkit.

Targets (--to):
  hf           a Hugging Face directory transformers loads with no attnkit installed
  onnx         encoder and decoder-with-past ONNX graphs (onnxruntime), with a runner
  ctranslate2  a CTranslate2 model directory (through CTranslate2's own converter)

Example:
  attnkit export --checkpoint runs/de_en/averaged --to hf --out exports/de_en_hf
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from attnkit.cli.common import add_device_argument, check_out_dir

# --to NAME -> "module:function(loaded: LoadedModel, out: Path) -> None".
EXPORTERS: dict[str, str] = {
    "hf": "attnkit.interop.hf_export:export_hf",
    "onnx": "attnkit.interop.onnx_export:export_onnx",
    "ctranslate2": "attnkit.interop.ct2_export:export_ctranslate2",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint or run directory")
    parser.add_argument("--to", required=True, choices=sorted(EXPORTERS), help="target format")
    parser.add_argument("--out", required=True, help="directory to write")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    add_device_argument(parser)


def run(args: argparse.Namespace) -> int:
    from attnkit.checkpoints.loading import load_model

    out = Path(args.out)
    check_out_dir(out, overwrite=args.overwrite)
    loaded = load_model(args.checkpoint, "cpu")
    module, _, name = EXPORTERS[args.to].partition(":")
    exporter = getattr(importlib.import_module(module), name)
    exporter(loaded, out, overwrite=args.overwrite)
    print(f"exported {loaded.directory} to {out} ({args.to})")
    return 0
