"""Score a text-to-text (T5) multi-task checkpoint on both of its tasks (issue 27).

* Multi30k De->En: test2016's German sources with the task prefix
  ``"translate German to English: "``, decoded by ``attnkit evaluate`` (beam and
  alpha as the translation recipe's evaluation: 5 and 0.6), which prints
  sacreBLEU and the tokenized lowercased BLEU that published Multi30k figures use.
* SST-2: the 872 development sentences with the prefix ``"sst2 sentence: "``,
  decoded greedily by ``attnkit translate``; the output must be the label's text
  (``0``/``1``) exactly: accuracy is the share of exact matches (anything else
  the model writes counts as wrong).

    python experiments/t5_multitask_eval.py --checkpoint runs/t5_multitask \
        --data ../shared/data --json t5_eval.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ATTNKIT = [sys.executable, "-c", "import sys; from attnkit.cli.main import main; sys.exit(main())"]
MT_PREFIX = "translate German to English: "
SST2_PREFIX = "sst2 sentence: "


def _prefixed(lines: list[str], prefix: str, path: Path) -> Path:
    path.write_text("".join(prefix + line + "\n" for line in lines), encoding="utf-8")
    return path


def score_translation(checkpoint: str, data: Path, work: Path, beam: int) -> dict[str, object]:
    sources = (data / "multi30k" / "test2016.de").read_text(encoding="utf-8").splitlines()
    src = _prefixed(sources, MT_PREFIX, work / "test2016.prefixed.de")
    out = subprocess.run(
        [
            *ATTNKIT,
            "evaluate",
            "--checkpoint",
            checkpoint,
            "--src",
            str(src),
            "--ref",
            str(data / "multi30k" / "test2016.en"),
            "--beam",
            str(beam),
            "--alpha",
            "0.6",
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def score_sst2(checkpoint: str, data: Path, work: Path) -> dict[str, object]:
    rows = (data / "sst2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    labels, sentences = zip(*(row.split("\t", 1) for row in rows), strict=True)
    src = _prefixed(list(sentences), SST2_PREFIX, work / "sst2_dev.prefixed.txt")
    out = subprocess.run(
        [*ATTNKIT, "translate", "--checkpoint", checkpoint, "--input", str(src), "--greedy"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    right = sum(hyp.strip() == label for hyp, label in zip(out, labels, strict=True))
    other = sum(hyp.strip() not in ("0", "1") for hyp in out)
    return {"accuracy": right / len(labels), "right": right, "n": len(labels), "not_a_label": other}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--json", help="also write the scores here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work, data = Path(tmp), Path(args.data)
        result = {
            "checkpoint": args.checkpoint,
            "de_en": score_translation(args.checkpoint, data, work, args.beam),
            "sst2": score_sst2(args.checkpoint, data, work),
        }
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
