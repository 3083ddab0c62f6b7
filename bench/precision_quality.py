"""How far each ``--precision`` moves a decoder-only model's logits from fp32 (CPU).

For an imported or trained decoder-only checkpoint (e.g. SmolLM2 from
``attnkit import --from gguf``), one forward over each prompt in fp32 and in
every other precision (``quantize_model``); prints, per precision, the
relative logits error (max |difference| over max |logit|, worst and median
over prompts) and how many positions keep fp32's argmax.

    python bench/precision_quality.py --checkpoint runs/smollm2
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

import torch
from common import environment, format_table

from attnkit.checkpoints import load_model
from attnkit.quantize import PRECISIONS, quantize_model

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "In 1492, Columbus sailed across the Atlantic Ocean and",
    "Les chats dorment souvent pendant la journée, mais la nuit ils",
    "1, 1, 2, 3, 5, 8, 13, 21,",
]


@torch.no_grad()
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.checkpoint, "cpu")
    assert loaded.tokenizer is not None, "the checkpoint has no tokenizer"
    ids = [torch.tensor([loaded.tokenizer.encode(text)]) for text in PROMPTS]
    reference = [loaded.model.eval()(x).logits for x in ids]
    rows, results = [], {}
    for precision in PRECISIONS:
        model = quantize_model(copy.deepcopy(loaded.model), precision)
        errors, same, total = [], 0, 0
        for x, ref in zip(ids, reference, strict=True):
            out = model(x).logits
            errors.append(float((out - ref).abs().max() / ref.abs().max()))
            same += int((out.argmax(-1) == ref.argmax(-1)).sum())
            total += ref.shape[1]
        median = statistics.median(errors)
        results[precision] = {"max_rel_error": max(errors), "median_rel_error": median,
                              "argmax_same": same, "positions": total}  # fmt: skip
        rows.append([precision, f"{max(errors):.2%}", f"{median:.2%}", f"{same}/{total}"])
    print(environment(torch.device("cpu")))
    print(format_table(["precision", "max rel. logits error", "median", "argmax = fp32"], rows))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
