"""Instruction data that teaches a format: answer with the city a sentence names, as JSON.

``python experiments/city_json.py OUT_DIR`` writes ``train.jsonl`` (400 conversations)
and ``valid.jsonl`` (60, with cities and sentence patterns the training set never
shows) for ``configs/smollm2_instruct.yaml``; ``python experiments/city_json.py --score
RUN`` asks a checkpoint (``attnkit generate --chat``'s path, greedy) the held-out
questions and prints how many answers are exactly ``{"city": "<the city>"}``.

The task needs no knowledge a 135M model lacks (the city is in the question); what
the instruct model does not do out of the box is answer in one fixed JSON shape.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

CITIES = ["Paris", "Rome", "Madrid", "Lisbon", "Berlin", "Vienna", "Prague", "Warsaw", "Oslo",
          "Dublin", "Athens", "Cairo", "Lagos", "Nairobi", "Tokyo", "Seoul", "Lima", "Quito",
          "Toronto", "Denver", "Boston", "Sydney", "Perth", "Manila", "Hanoi", "Delhi"]  # fmt: skip
HELD_OUT_CITIES = ["Helsinki", "Brussels", "Santiago", "Osaka", "Chicago", "Marseille"]
PATTERNS = ["I flew to {} last week.", "My sister lives in {} now.", "The meeting is in {}.",
            "We spent our holidays near {}.", "Is the museum in {} open on Sundays?",
            "He was born in {} in 1990.", "The train to {} leaves at noon."]  # fmt: skip
HELD_OUT_PATTERNS = ["They opened a bakery in {}.", "Send the parcel to our office in {}."]
QUESTION = "Which city does this sentence mention? Answer in JSON.\n{}"


def record(sentence: str, city: str) -> dict:
    return {"messages": [{"role": "user", "content": QUESTION.format(sentence)},
                         {"role": "assistant", "content": json.dumps({"city": city})}]}  # fmt: skip


def held_out(rng: random.Random, n: int) -> list[tuple[str, str]]:
    return [(rng.choice(HELD_OUT_PATTERNS + PATTERNS).format(c), c)
            for c in (rng.choice(HELD_OUT_CITIES) for _ in range(n))]  # fmt: skip


def write(out: Path) -> None:
    rng = random.Random(0)
    out.mkdir(parents=True, exist_ok=True)
    train = [(rng.choice(PATTERNS).format(c), c) for c in (rng.choice(CITIES) for _ in range(400))]
    for name, pairs in (("train", train), ("valid", held_out(rng, 60))):
        lines = [json.dumps(record(s, c)) for s, c in pairs]
        (out / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}/train.jsonl (400) and {out}/valid.jsonl (60)")


def score(run: str, n: int = 20) -> None:
    import torch

    from attnkit.checkpoints import load_model
    from attnkit.cli.generate import chat_prompt
    from attnkit.decoding.generate import generate

    loaded = load_model(run, "cpu")
    model, tok = loaded.model, loaded.tokenizer
    exact = 0
    for sentence, city in held_out(random.Random(1), n):
        ids = torch.tensor([tok.encode(chat_prompt(tok, QUESTION.format(sentence)))])
        with torch.no_grad():
            new = generate(model, ids, 16, temperature=0.0, eos_id=model.eos_id)
        answer = tok.decode(new[0, ids.size(1) :].tolist()).strip()
        exact += answer == json.dumps({"city": city})
    print(f'{run}: {exact}/{n} held-out answers are exactly {{"city": ...}} with the right city')


if __name__ == "__main__":
    if sys.argv[1:2] == ["--score"]:
        score(sys.argv[2])
    else:
        write(Path(sys.argv[1]))
