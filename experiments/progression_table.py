"""Turn experiments/multi30k_progression.sh's results.jsonl into the Markdown tables of
docs/results.md: the progression (against its published anchors) and the small Table 3.

    python experiments/progression_table.py runs/progression/results.jsonl
"""

from __future__ import annotations

import json
import sys

# Tokenized lowercased BLEU, greedy, Multi30k De->En test2016 (bentrevett/pytorch-seq2seq).
ANCHORS = {
    "rnn_lstm": "13.8 (LSTM)",
    "rnn_gru_context": "20.6 (GRU + context)",
    "bahdanau": "28.3",
    "luong_general": "none published",
    "luong_dot": "none published",
    "luong_location": "none published",
    "transformer_sinusoidal": "36.5",
    "transformer_learned": "36.5",
    "transformer_relative16": "36.5",
}
# The paper's Table 3 direction of change against the base row (4 heads here, dropout 0.3,
# label smoothing 0.1, sinusoidal positions).
TABLE3 = {
    "heads1": "(A) 1 head: 0.9 BLEU worse than 8",
    "heads8": "(A) more heads help up to a point",
    "heads16": "(A) 16 heads: slightly worse than 8 (too many)",
    "dropout0": "(D) no dropout: worse (over-fitting)",
    "dropout0.1": "(D) dropout helps",
    "ls0": "(D) no label smoothing: worse BLEU, better perplexity",
    "transformer_learned": "(E) learned positions: nearly identical",
}


def table(records: list[dict], rows: dict[str, str], note: str) -> str:
    lines = [
        f"| row | search | BLEU (sacreBLEU) | tok. lc BLEU | chrF | train s | {note} |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        base = r["row"] == "transformer_sinusoidal"  # the reference row of both tables
        if r["row"] not in rows and not base:
            continue
        lines.append(
            f"| {r['row']} | {r['search']} | {r['bleu']:.1f} | {r['bleu_lc']:.1f} | "
            f"{r['chrf']:.1f} | {r['train_seconds']} | {rows.get(r['row'], 'base row')} |"
        )
    return "\n".join(lines)


def main(path: str) -> None:
    records = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    print(table(records, ANCHORS, "anchor"))
    print()
    print(table(records, TABLE3, "paper's direction"))
    print()
    for r in records:
        print(f"- {r['row']} ({r['search']}): `{r['command']}`, commit {r['commit']}, "
              f"{r['device']}, {r['date']}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
