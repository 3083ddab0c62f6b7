"""A corpus of real documents for next-sentence prediction: Python's own reference topics.

``python experiments/pydoc_corpus.py OUT_DIR`` writes ``OUT_DIR/input.txt``: the
topics of the Python Language Reference that CPython ships for ``help()``
(``pydoc_data.topics``: "for", "assignment", "exceptions", ... 79 of them in
Python 3.11, ~465,000 characters of English prose with some grammar and code), one
topic a document (documents separated by a blank line), one sentence a line, in the
topics' sorted order, so ``data.valid_fraction: 0.1`` holds out the last eighth or so
whole. It is what ``attnkit.data.sentence_pairs`` reads (``task: mlm`` with
``train.nsp: true``): NSP's documents should be articles, as BERT's were (Wikipedia,
books), and Tiny Shakespeare's are speeches of one to four lines.

Sentences: a topic's paragraphs (blank-line separated) with their lines joined, then
split after ``.``, ``!`` or ``?`` followed by a space and a capital, a quote or a
bracket; a code or grammar block (an indented paragraph) is one "sentence"; the
headings' underlines (``****``, ``====``) are dropped. The text is the Python that
runs this script's (its version is printed): another Python ships other topics.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(*])")
UNDERLINE = re.compile(r"^[*=\-~^]{3,}$")


def sentences(topic: str) -> list[str]:
    """One topic's sentences, in order (see the module docstring)."""
    out: list[str] = []
    for paragraph in re.split(r"\n\s*\n", topic):
        lines = [line for line in paragraph.splitlines() if not UNDERLINE.match(line.strip())]
        if not any(line.strip() for line in lines):
            continue
        if all(line.startswith("   ") for line in lines if line.strip()):  # code, grammar
            out.append(" ".join(line.strip() for line in lines if line.strip()))
            continue
        text = " ".join(line.strip() for line in lines if line.strip())
        out.extend(s for s in SENTENCE_END.split(text) if s.strip())
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.splitlines()[0], "\nusage: python experiments/pydoc_corpus.py OUT_DIR")
        return 2
    from pydoc_data.topics import topics

    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    documents = [sentences(topics[name]) for name in sorted(topics)]
    documents = [d for d in documents if len(d) >= 2]
    text = "\n\n".join("\n".join(d) for d in documents) + "\n"
    (out / "input.txt").write_text(text, encoding="utf-8")
    n = sum(len(d) for d in documents)
    print(f"wrote {out / 'input.txt'}: {len(documents)} documents (pydoc topics of Python "
          f"{sys.version.split()[0]}), {n} sentences, {len(text):,} characters")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
