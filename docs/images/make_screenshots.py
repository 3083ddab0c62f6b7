"""Remake the pictures the docs show, from short real runs (never drawn by hand).

Runs ``attnkit quickstart`` and copies the loss curve and the cross-attention heatmap it
writes; trains ``swin_digits`` and ``vit_digits`` for their budgets and draws
``attnkit attention --image digits:0`` on each (the Swin picture shows its windows);
with ``--explorer`` (needs the serve extra, playwright and ``/usr/bin/chromium``) also
remakes the explorer screenshot with ``make_explorer_png.py``.

  python docs/images/make_screenshots.py                 # ~6 minutes on a quiet 2-core CPU
  python docs/images/make_screenshots.py --quick         # seconds each, for a check

The runs are budgeted in steps, not minutes (what a quiet 2-core CPU reaches in the
recipes' time budgets), so a busy machine draws the same pictures, only later.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FULL_QUICKSTART = ["--max-steps", "1700", "--minutes", "60"]
QUICK_QUICKSTART = ["--max-steps", "20", "--train-size", "1200", "--test-size", "20"]
FULL_IMAGES = {
    "swin_digits": ["--set", "train.max_steps=600", "--set", "train.max_minutes=30"],
    "vit_digits": ["--set", "train.max_minutes=30"],
}  # its own 1,380 steps
QUICK_IMAGES = ["--set", "train.max_steps=5", "--set", "train.max_minutes=0.2"]


def attnkit(*args: str) -> None:
    """One ``attnkit`` command in this interpreter; a failure stops the script."""
    print("$ attnkit " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "attnkit", *args], check=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny budgets (pictures of a weak model)")
    p.add_argument("--out", default=str(HERE), help="where the PNGs go (default: docs/images)")
    p.add_argument("--explorer", action="store_true", help="also remake explorer.png")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="attnkit-shots-") as tmp:
        work = Path(tmp)
        quick = QUICK_QUICKSTART if args.quick else FULL_QUICKSTART
        attnkit("quickstart", "--no-progress", "--out", str(work / "qs"), *quick)
        shutil.copyfile(work / "qs/loss.png", out / "quickstart_loss.png")
        shutil.copyfile(work / "qs/attention.png", out / "quickstart_attention.png")
        # digit 7 is a 5 whose strokes sit in two patches: the ViT's map shows them
        pictures = (("swin_digits", "swin_windows.png", "digits:0"),
                    ("vit_digits", "vit_digits_attention.png", "digits:7"))  # fmt: skip
        for recipe, name, digit in pictures:
            run = work / recipe
            budget = QUICK_IMAGES if args.quick else FULL_IMAGES[recipe]
            attnkit("train", "--config", recipe, "--no-progress", "--out", str(run), *budget)
            attnkit("attention", "--checkpoint", str(run), "--image", digit,
                    "--out", str(out / name))  # fmt: skip
        if args.explorer:
            subprocess.run([sys.executable, str(HERE / "make_explorer_png.py"),
                            "--checkpoint", str(work / "qs"),
                            "--out", str(out / "explorer.png")], check=True)  # fmt: skip
    print(f"wrote the pictures into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
