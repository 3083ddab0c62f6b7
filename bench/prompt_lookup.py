"""Prompt-lookup decoding against plain greedy: tokens/s, tokens per model pass, same output.

Both run on the stepper ``attnkit generate`` uses (the inference plan at one
row), on chat prompts built from e-mails (JSONL, a ``text`` field, e.g.
AESLC), timed round-robin per e-mail (``bench.common.round_robin``) so load
from other processes hits both alike. Two tasks: ``quote`` (repeat the e-mail
word for word: copy-heavy) and ``summarize`` (one sentence: little copying).
Every e-mail's two outputs must be the same tokens; mismatches are counted.

    python -m attnkit import --from gguf SmolLM2-135M-Instruct.Q4_1.gguf --out runs/smollm2
    python bench/prompt_lookup.py --checkpoint runs/smollm2 --emails aeslc/validation.jsonl \
        --count 10 --new-tokens 128 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import environment, median, round_robin  # noqa: E402

TASKS = {
    "quote": "Repeat the following e-mail word for word, nothing else:\n\n{text}",
    "summarize": "Summarize the following e-mail in one sentence:\n\n{text}",
}


def emails(path: Path, count: int, max_chars: int) -> list[str]:
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"].strip()
            if 200 <= len(text) <= max_chars:
                out.append(text)
            if len(out) == count:
                break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--emails", type=Path, required=True, help="JSONL with a 'text' field")
    parser.add_argument("--tasks", default="quote,summarize")
    parser.add_argument("--count", type=int, default=10, help="e-mails per task")
    parser.add_argument("--max-chars", type=int, default=1200)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--lookup", type=int, default=10, help="draft tokens K")
    parser.add_argument("--ngram", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="fp32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from attnkit.checkpoints import load_model
    from attnkit.data.chat import chat_template_of
    from attnkit.decoding.generate import stream
    from attnkit.decoding.lookup import LookupStats, lookup_stream
    from attnkit.inference import CheckpointInfo, Machine, Options, make_plan, prepare

    loaded = load_model(args.checkpoint, "cpu")
    model, tokenizer = loaded.model, loaded.tokenizer
    options = Options(precision=args.precision, rows=1, calibrate=True)
    plan = make_plan(CheckpointInfo.of(model, loaded.family.kind), Machine.of(model), options)
    stepper: Any = prepare(loaded, plan)
    template = chat_template_of(tokenizer)
    device = torch.device("cpu")
    print(json.dumps(environment(device)))
    print(f"# plan: {plan.describe()}")
    texts = emails(args.emails, args.count, args.max_chars)

    for task in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        seconds = {"greedy": 0.0, "lookup": 0.0}
        tokens = mismatches = 0
        stats = LookupStats()
        for text in texts:
            chat = [{"role": "user", "content": TASKS[task].format(text=text)}]
            ids = torch.tensor(
                [tokenizer.encode(template.render(chat, add_generation_prompt=True))]
            )
            out: dict[str, list[int]] = {}

            @torch.inference_mode()
            def plain(ids: torch.Tensor = ids, out: dict[str, list[int]] = out) -> None:
                run = stream(model, ids, args.new_tokens, temperature=0.0,
                             eos_id=model.eos_id, stepper=stepper)  # fmt: skip
                out["greedy"] = [int(t[0]) for t in run]

            @torch.inference_mode()
            def lookup(ids: torch.Tensor = ids, out: dict[str, list[int]] = out) -> None:
                one = LookupStats()
                run = lookup_stream(model, ids, args.new_tokens, num_tokens=args.lookup,
                                    max_ngram=args.ngram, eos_id=model.eos_id, stepper=stepper,
                                    stats=one)  # fmt: skip
                out["lookup"] = [int(t[0]) for t in run]
                out["stats"] = [one.tokens, one.forwards, one.drafted, one.accepted]

            plain()  # warm-up (allocator, page-ins)
            times = round_robin({"greedy": plain, "lookup": lookup}, args.rounds, device)
            for name in seconds:
                seconds[name] += median(times[name])
            mismatches += out["greedy"] != out["lookup"]
            tokens += len(out["greedy"])
            n, f, d, a = out["stats"]
            stats.tokens += n
            stats.forwards += f
            stats.drafted += d
            stats.accepted += a
        g, lk = tokens / seconds["greedy"], tokens / seconds["lookup"]
        print(
            f"{task}: {len(texts)} e-mails, {tokens} tokens; greedy {g:.1f} tok/s, "
            f"lookup K={args.lookup} {lk:.1f} tok/s = {lk / g:.2f}x; "
            f"{stats.tokens_per_forward:.2f} tokens/pass, {stats.accepted}/{stats.drafted} "
            f"drafted accepted; outputs differing: {mismatches}",
            flush=True,
        )


if __name__ == "__main__":
    main()
