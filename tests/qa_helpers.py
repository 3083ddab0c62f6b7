"""Made-up SQuAD files for the question-answering tests: "what colour is the dog?"
over short paragraphs naming a colour per animal, learnable by a tiny model."""

from __future__ import annotations

import json
import random
from pathlib import Path

ANIMALS = ["cat", "dog", "cow", "fox", "owl", "pig"]
COLOURS = ["red", "blue", "green", "pink", "grey", "gold"]


def paragraph(rng: random.Random, questions: int) -> dict:
    animals = rng.sample(ANIMALS, 3)
    colours = [rng.choice(COLOURS) for _ in animals]
    context = " ".join(f"the {a} is {c}." for a, c in zip(animals, colours))
    qas = []
    for k in rng.sample(range(3), questions):
        sentence = f"the {animals[k]} is "
        start = context.index(sentence) + len(sentence)
        qas.append(
            {
                "question": f"what colour is the {animals[k]}?",
                "answers": [{"text": colours[k], "answer_start": start}],
            }
        )
    return {"context": context, "qas": qas}


def squad_file(path: Path, paragraphs: int, seed: int, *, prefix: str = "q") -> Path:
    rng = random.Random(seed)
    articles = [{"title": "t", "paragraphs": [paragraph(rng, 2) for _ in range(paragraphs)]}]
    n = 0
    for p in articles[0]["paragraphs"]:
        for qa in p["qas"]:
            qa["id"] = f"{prefix}{n}"
            n += 1
    path.write_text(json.dumps({"version": "1.1", "data": articles}))
    return path


def shared_squad() -> Path | None:
    """The shared SQuAD folder ($ATTNKIT_DATA/squad), or None when it is not there."""
    import os

    root = Path(os.environ.get("ATTNKIT_DATA", Path(__file__).parents[2] / "shared" / "data"))
    return root / "squad" if (root / "squad").is_dir() else None
