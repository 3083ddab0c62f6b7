"""Import pretrained weights into an attnkit checkpoint.

Sources (--from):
  hf     a Hugging Face model, by name on the Hub (ORG/NAME[@REVISION]) or as a
         local directory: MarianMTModel (as attnkit export --to hf writes it),
         BERT (BertModel, BertForMaskedLM, BertForSequenceClassification, and
         BertForTokenClassification / BertForQuestionAnswering, which attnkit tag /
         attnkit answer run as imported), GPT-2 (GPT2LMHeadModel), Llama
         (LlamaForCausalLM) or T5; config.json, model.safetensors and
         tokenizer.json, never a pickle (pytorch_model.bin is refused unread)
  gguf   a GGUF file (Llama-architecture models such as SmolLM2), local or on
         the Hub as ORG/NAME[@REVISION]:FILE.gguf

A name is fetched through huggingface_hub into its cache (HF_HOME,
HF_HUB_OFFLINE=1, HF_TOKEN and HF_ENDPOINT work as usual), only the files the
import reads, with a progress bar; import.json records the repository, the
commit the revision resolved to and each file's SHA-256. Every command that
takes a checkpoint also accepts hf:ORG/NAME[@REVISION]: imported once into
attnkit's cache, then reused.

The result is a run directory (checkpoints/step_00000000 and import.json) that
translate/generate/evaluate/attention/export accept. Every size in the file's
config or metadata is checked against its tensors before anything is built.

Examples:
  attnkit import --from hf sentence-transformers/all-MiniLM-L6-v2 --out runs/minilm
  attnkit import --from hf HuggingFaceTB/SmolLM2-135M-Instruct@main --out runs/smollm2
  attnkit import --from gguf ORG/NAME-GGUF@REVISION:FILE.Q8_0.gguf --out runs/from_gguf
  attnkit import --from hf exports/de_en_hf --out runs/de_en_back
  attnkit import --from gguf SmolLM2-135M-Instruct.Q4_1.gguf --out runs/smollm2
  attnkit import --from gguf SmolLM2-135M-Instruct.Q4_1.gguf --keep-quantized --out runs/smollm2_q4
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from attnkit.errors import UsageError
from attnkit.output_paths import check_not_in_run_checkpoints, check_replaceable_dir

# --from NAME -> "module:function(source: Path, out: Path) -> Path" (the checkpoint written).
IMPORTERS: dict[str, str] = {
    "hf": "attnkit.interop.hf.importer:import_hf",
    "gguf": "attnkit.interop.gguf.importer:import_gguf",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from", dest="source_format", required=True, choices=sorted(IMPORTERS),
        help="the format of SOURCE",
    )  # fmt: skip
    parser.add_argument(
        "source",
        help="a model directory (hf) or file (gguf), or a Hub name: ORG/NAME[@REVISION] (hf), "
        "ORG/NAME[@REVISION]:FILE.gguf (gguf)",
    )
    parser.add_argument("--out", required=True, help="run directory to write the checkpoint to")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument(
        "--keep-quantized",
        action="store_true",
        help="gguf only: keep Q4_0/Q4_1/Q8_0 weight matrices as the file's blocks (exactly, "
        "no second rounding), so the checkpoint runs them on the CPU's int4 kernel by default "
        "(--precision int4; Q8_0 as two 4-bit planes); other tensor types are dequantized to "
        "float32 as without it",
    )


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    source = Path(args.source)
    options = {"keep_quantized": True} if args.keep_quantized else {}
    if options and args.source_format != "gguf":
        raise UsageError("--keep-quantized: only --from gguf holds quantized blocks")
    if not source.exists():
        from attnkit.interop.hub.client import looks_like_repo

        if not looks_like_repo(args.source):
            raise UsageError(f"{source}: not found (nor a Hub name: ORG/NAME[@REVISION])")
        from attnkit.interop.hub.imports import import_named

        target = check_replaceable_dir(out, overwrite=args.overwrite)
        check_not_in_run_checkpoints(target)  # a run's checkpoints/ holds its own steps only
        written = import_named(
            args.source_format, args.source, out, overwrite=args.overwrite, **options
        )
        print(f"imported {args.source} into {written}")
        return 0
    target = check_replaceable_dir(out, overwrite=args.overwrite, inputs=[source])
    check_not_in_run_checkpoints(target)  # a run's checkpoints/ holds its own steps only
    module, _, name = IMPORTERS[args.source_format].partition(":")
    importer = getattr(importlib.import_module(module), name)
    written = importer(source, out, overwrite=args.overwrite, **options)
    print(f"imported {source} into {written}")
    return 0
