"""Turn experiments/multi30k_progression.sh's results into the Markdown tables of
docs/results.md: the progression (against its published anchors) and the small Table 3
(against the paper's values and direction of change).

    python experiments/progression_table.py runs/progression/results.jsonl

Steps and parameter counts are read from each row's training log beside results.jsonl
(``OUT/ROW.train.log``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

BASE = "transformer_sinusoidal"  # the reference row of both tables

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

# The paper's Table 3 (newstest2013 En->De dev BLEU; base: 8 heads, dropout 0.1, eps_ls 0.1,
# sinusoids = 25.8). Our base row has 4 heads, dropout 0.3, eps_ls 0.1, sinusoids.
# Each entry: what the row changes, the paper's figures, and the paper's sign of the
# change measured the way this table measures it (row minus `against`).
TABLE3: dict[str, tuple[str, str, str, int]] = {
    # row: (change, paper, against, paper's sign)
    "heads1": ("4 -> 1 head", "(A) 1 head 24.9 vs 4 heads 25.5", BASE, -1),
    "heads8": ("4 -> 8 heads", "(A) 8 heads 25.8 vs 4 heads 25.5", BASE, +1),
    "heads16": ("4 -> 16 heads", "(A) 16 heads 25.8 vs 4 heads 25.5", BASE, +1),
    "dropout0": ("dropout 0.3 -> 0", "(D) dropout 0.0: 24.6 vs 25.8 at 0.1", "dropout0.1", -1),
    "dropout0.1": ("dropout 0.3 -> 0.1", "(D) no 0.3 row in the paper", BASE, 0),
    "ls0": ("label smoothing 0.1 -> 0", "(D) eps_ls 0: 25.3 vs 25.8 BLEU", BASE, -1),
    "transformer_learned": ("sinusoids -> learned", "(E) learned 25.7 vs 25.8", BASE, -1),
}


def train_facts(results_path: Path, row: str) -> tuple[str, str]:
    """(steps, parameters) from ``ROW.train.log`` beside the results, or ``?``."""
    log = results_path.parent / f"{row}.train.log"
    if not log.is_file():
        return "?", "?"
    text = log.read_text(encoding="utf-8", errors="replace")
    params = re.search(r"([\d.]+)M parameters", text)
    steps = "?"
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                steps = str(json.loads(line)["step"])
            except (json.JSONDecodeError, KeyError):
                pass
            break
    return steps, f"{params.group(1)}M" if params else "?"


def by_row(records: list[dict]) -> dict[str, dict[str, dict]]:
    """``{row: {"greedy": record, "beam": record}}`` (the last record of each wins)."""
    rows: dict[str, dict[str, dict]] = {}
    for r in records:
        rows.setdefault(r["row"], {})[r["search"]] = r
    return rows


def _fmt(record: dict | None, key: str) -> str:
    return "-" if record is None or key not in record else f"{record[key]:.1f}"


def progression_table(rows: dict[str, dict[str, dict]], path: Path) -> str:
    lines = [
        "| row | params | steps | train s | greedy: tok. lc BLEU | beam 5: tok. lc BLEU "
        "| beam 5: sacreBLEU | beam 5: chrF | test ppl | anchor (greedy, tok. lc) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row, anchor in ANCHORS.items():
        if row not in rows:
            continue
        greedy, beam = rows[row].get("greedy"), rows[row].get("beam")
        any_record = greedy or beam
        steps, params = train_facts(path, row)
        lines.append(
            f"| {row} | {params} | {steps} | {any_record['train_seconds']} | "
            f"{_fmt(greedy, 'bleu_lc')} | {_fmt(beam, 'bleu_lc')} | {_fmt(beam, 'bleu')} | "
            f"{_fmt(beam, 'chrf')} | {_fmt(any_record, 'perplexity')} | {anchor} |"
        )
    return "\n".join(lines)


def table3(rows: dict[str, dict[str, dict]], path: Path) -> str:
    lines = [
        "| row | change | steps | beam 5: tok. lc BLEU | change in BLEU | test ppl "
        "| the paper | same direction as the paper? |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if BASE in rows:
        steps, _ = train_facts(path, BASE)
        base = rows[BASE].get("beam")
        lines.append(
            f"| {BASE} | base: 4 heads, dropout 0.3, eps_ls 0.1, sinusoids | {steps} | "
            f"{_fmt(base, 'bleu_lc')} | - | {_fmt(base, 'perplexity')} | base: 25.8 | - |"
        )
    for row, (change, paper, against, sign) in TABLE3.items():
        beam = rows.get(row, {}).get("beam")
        if beam is None:
            continue
        ref = rows.get(against, {}).get("beam")
        steps, _ = train_facts(path, row)
        delta, verdict = "-", "-"
        if ref is not None:
            d = beam["bleu_lc"] - ref["bleu_lc"]
            delta = f"{d:+.1f} vs {against}"
            if sign:
                verdict = "yes" if d * sign > 0 else "no" if d * sign < 0 else "no change"
        lines.append(
            f"| {row} | {change} | {steps} | {_fmt(beam, 'bleu_lc')} | {delta} | "
            f"{_fmt(beam, 'perplexity')} | {paper} | {verdict} |"
        )
    return "\n".join(lines)


def main(path_text: str) -> None:
    path = Path(path_text)
    records = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    rows = by_row(records)
    print(progression_table(rows, path))
    print()
    print(table3(rows, path))
    print()
    for r in records:
        print(f"- {r['row']} ({r['search']}): `{r['command']}`, commit {r['commit']}, "
              f"{r['device']}, {r['date']}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
