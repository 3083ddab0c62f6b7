"""Speculative greedy decoding against plain greedy: tokens/s, tokens per model pass, same output.

Both run on the stepper ``attnkit generate`` uses (the inference plan at one
row), on chat prompts built from e-mails (JSONL, a ``text`` field, e.g.
AESLC), timed round-robin per e-mail (``bench.common.round_robin``) so load
from other processes hits both alike. Two tasks: ``quote`` (repeat the e-mail
word for word: copy-heavy) and ``summarize`` (one sentence: little copying).
Every e-mail's outputs must be the same tokens; mismatches are counted. The drafters:
prompt lookup (``--lookup K``) and, with ``--draft CKPT``, a small draft model of the
same tokenizer (``--draft-tokens K``, prepared with the same plan).

    python -m attnkit import --from gguf SmolLM2-135M-Instruct.Q4_1.gguf --out runs/smollm2
    python bench/prompt_lookup.py --checkpoint runs/smollm2 --emails aeslc/validation.jsonl \
        --count 10 --new-tokens 128 --rounds 3
    python bench/prompt_lookup.py --checkpoint runs/smollm2-360m --draft runs/smollm2 ...
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
    parser.add_argument("--draft", type=Path, help="a draft model's checkpoint (same tokenizer)")
    parser.add_argument("--draft-tokens", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from attnkit.checkpoints import load_model
    from attnkit.data.chat import chat_template_of
    from attnkit.decoding.draft import ModelDrafter
    from attnkit.decoding.generate import stream
    from attnkit.decoding.lookup import NgramDrafter
    from attnkit.decoding.protocol import Drafter
    from attnkit.decoding.speculative import SpeculativeStats, speculative_stream
    from attnkit.inference import CheckpointInfo, Machine, Options, make_plan, prepare

    def prepared(path: Path) -> tuple[Any, Any, Any]:
        loaded = load_model(path, "cpu")
        options = Options(precision=args.precision, rows=1, calibrate=True)
        info = CheckpointInfo.of(loaded.model, loaded.family.kind)
        plan = make_plan(info, Machine.of(loaded.model), options)
        return loaded, plan, prepare(loaded, plan)

    loaded, plan, stepper = prepared(args.checkpoint)
    model, tokenizer = loaded.model, loaded.tokenizer
    drafters: dict[str, tuple[Any, int]] = {"lookup": (lambda: NgramDrafter(args.ngram),
                                                       args.lookup)}  # fmt: skip
    if args.draft is not None:
        small, _, small_stepper = prepared(args.draft)
        drafters["draft"] = (lambda: ModelDrafter(small.model, stepper=small_stepper),
                             args.draft_tokens)  # fmt: skip
    template = chat_template_of(tokenizer)
    device = torch.device("cpu")
    print(json.dumps(environment(device)))
    print(f"# plan: {plan.describe()}")
    texts = emails(args.emails, args.count, args.max_chars)

    for task in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        seconds = {"greedy": 0.0, **{name: 0.0 for name in drafters}}
        stats = {name: SpeculativeStats() for name in drafters}
        tokens = mismatches = 0
        for text in texts:
            chat = [{"role": "user", "content": TASKS[task].format(text=text)}]
            ids = torch.tensor(
                [tokenizer.encode(template.render(chat, add_generation_prompt=True))]
            )
            out: dict[str, list[int]] = {}
            counts: dict[str, SpeculativeStats] = {}

            @torch.inference_mode()
            def plain(ids: torch.Tensor = ids, out: dict[str, list[int]] = out) -> None:
                run = stream(model, ids, args.new_tokens, temperature=0.0,
                             eos_id=model.eos_id, stepper=stepper)  # fmt: skip
                out["greedy"] = [int(t[0]) for t in run]

            def speculative(
                name: str,
                ids: torch.Tensor = ids,
                out: dict[str, list[int]] = out,
                counts: dict[str, SpeculativeStats] = counts,
            ) -> Any:
                make, k = drafters[name]

                @torch.inference_mode()
                def go() -> None:
                    one = SpeculativeStats()
                    drafter: Drafter = make()
                    run = speculative_stream(model, ids, args.new_tokens, drafter,
                                             num_tokens=k, eos_id=model.eos_id,
                                             stepper=stepper, stats=one)  # fmt: skip
                    out[name] = [int(t[0]) for t in run]
                    counts[name] = one

                return go

            plain()  # warm-up (allocator, page-ins)
            contenders = {"greedy": plain, **{name: speculative(name) for name in drafters}}
            times = round_robin(contenders, args.rounds, device)
            for name in seconds:
                seconds[name] += median(times[name])
            mismatches += any(out[name] != out["greedy"] for name in drafters)
            tokens += len(out["greedy"])
            for name, one in counts.items():
                total = stats[name]
                total.tokens += one.tokens
                total.forwards += one.forwards
                total.rounds += one.rounds
                total.drafted += one.drafted
                total.accepted += one.accepted
        g = tokens / seconds["greedy"]
        parts = []
        for name, (_, k) in drafters.items():
            rate, st = tokens / seconds[name], stats[name]
            parts.append(f"{name} K={k} {rate:.1f} tok/s = {rate / g:.2f}x, "
                         f"{st.tokens_per_forward:.2f} tokens/pass, {st.accepted_per_round:.2f} "
                         f"accepted/step, {st.accepted}/{st.drafted} drafted accepted")  # fmt: skip
        print(
            f"{task}: {len(texts)} e-mails, {tokens} tokens; greedy {g:.1f} tok/s; "
            + "; ".join(parts)
            + f"; outputs differing: {mismatches}",
            flush=True,
        )


if __name__ == "__main__":
    main()
