"""Turn experiments/position_extrapolation.sh's results into the Markdown table of
docs/results_positions.md: validation loss (nats per character) of each position
scheme at each context, the trained context first.

    python experiments/positions_table.py runs/positions/results.jsonl

A later record of the same (row, context) replaces an earlier one, so a re-run row
overwrites its old numbers. A context a scheme cannot read (a learned table) shows
as "n/a" with the reason below the table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ORDER = ["sinusoidal", "learned", "rotary", "alibi"]
TRAINED = 64


def read_records(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """(row, context) -> its latest record."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            latest[(record["row"], int(record["context"]))] = record
    return latest


def table(records: dict[tuple[str, int], dict[str, Any]]) -> str:
    rows = sorted({r for r, _ in records}, key=lambda r: (ORDER + [r]).index(r))
    contexts = sorted({c for _, c in records})
    head = ["positions", *(f"{c}" + (" (trained)" if c == TRAINED else "") for c in contexts)]
    lines = ["| " + " | ".join(head + ["train s"]) + " |", "|" + "---|" * (len(head) + 1)]
    notes: list[str] = []
    for row in rows:
        cells, seconds = [], "-"
        for context in contexts:
            record = records.get((row, context))
            if record is None:
                cells.append("-")
                continue
            seconds = str(record.get("train_seconds", "-"))
            if record.get("error"):
                cells.append("n/a")
                note = f"{row}: {record['error']}"
                if note not in notes:
                    notes.append(note)
            else:
                cells.append(f"{record['loss']:.3f} ({record['perplexity']:.2f})")
        lines.append("| " + " | ".join([row, *cells, seconds]) + " |")
    out = "\n".join(lines)
    out += "\n\nCells: validation loss in nats per character (perplexity); n/a: cannot be run."
    for note in notes:
        out += f"\n- {note}"
    any_record = next(iter(records.values()))
    out += (
        f"\n\ncommit {any_record.get('commit')}, device {any_record.get('device')}, "
        f"date {any_record.get('date')}"
    )
    return out + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print(table(read_records(Path(argv[0]))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
