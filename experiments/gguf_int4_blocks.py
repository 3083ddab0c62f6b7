"""SmolLM2's Q4_1 file run as its own 4-bit blocks (``import --from gguf --keep-quantized``).

    python experiments/gguf_int4_blocks.py FILE.gguf [--new-tokens 30]

Imports FILE twice (dequantized to float32, and with ``--keep-quantized``) and,
on the 10 prompts of ``gguf_llama_cpp.py``, compares with the float32 import's
greedy continuation (``--new-tokens`` tokens):

* ``agree``: teacher-forced on the prompt plus that continuation, the share of
  continuation positions where each model's next token (argmax) is float32's;
* ``same greedy``: how many prompts get float32's greedy tokens exactly.

Models: ``kept`` (what ``attnkit generate`` runs by default: the int4 linears as
loaded, with the file's codes, bf16 copies of its scales, bf16 activations; the
token table float32 for lookups, as dequantized from its Q8_0, and the output layer
tied to it keeping those Q8_0 blocks), ``kept int4`` (the same with ``--precision
int4`` given: the token table as int8 rows), and ``rtn`` (``--precision int4`` of the float
import: the file's weights rounded a second time to attnkit's own groups).
Not a test: it needs the real file and ~1 min.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from attnkit.checkpoints import load_model
from attnkit.decoding.generate import generate
from attnkit.inference import CheckpointInfo, Machine, Options, make_plan, stepper_for
from attnkit.inference.prepare import convert
from attnkit.interop.gguf.importer import import_gguf
from attnkit.quantize import quantize_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_llama_cpp import PROMPTS  # noqa: E402


def _argmax(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits.argmax(-1)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--new-tokens", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        plain_run = import_gguf(args.file, Path(tmp) / "plain")
        plain_s = time.perf_counter() - start
        start = time.perf_counter()
        kept_run = import_gguf(args.file, Path(tmp) / "kept", keep_quantized=True)
        kept_s = time.perf_counter() - start
        plain = load_model(plain_run, "cpu")
        tokenizer = plain.tokenizer
        models, plans = {}, []
        for name, precision in (("kept", None), ("kept int4", "int4")):
            kept = load_model(kept_run, "cpu")
            info = CheckpointInfo.of(kept.model, kept.family.kind, kept.weights)
            plans.append(make_plan(info, Machine.here("cpu"), Options(precision=precision)))
            models[name] = convert(kept.model, plans[-1], kept.tokenizer)
        models["rtn"] = quantize_model(load_model(plain_run, "cpu").model, "int4")
        agree = dict.fromkeys(models, 0)
        same = dict.fromkeys(models, 0)
        positions = 0
        for prompt in PROMPTS:
            ids = torch.tensor([tokenizer.encode(prompt)])
            full = generate(stepper_for(plain.model), ids, args.new_tokens, temperature=0.0)
            reference = _argmax(plain.model, full)[ids.size(1) - 1 : -1]
            positions += reference.numel()
            for name, model in models.items():
                agree[name] += int((_argmax(model, full)[ids.size(1) - 1 : -1] == reference).sum())
                own = generate(stepper_for(model), ids, args.new_tokens, temperature=0.0)
                same[name] += int(torch.equal(own, full))
    print(f"import: float32 {plain_s:.1f} s, --keep-quantized {kept_s:.1f} s")
    for plan in plans:
        print(plan.describe())
    for name in models:
        print(f"{name:10s} agree {agree[name]}/{positions} ({agree[name] / positions:.1%}), "
              f"same greedy {same[name]}/{len(PROMPTS)}")  # fmt: skip


if __name__ == "__main__":
    main()
