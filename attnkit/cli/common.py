"""Pieces the subcommands share: run directories, devices, loading checkpoints."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from attnkit.errors import UsageError


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default="auto",
        help="cpu, cuda, cuda:1, ... (default: auto = cuda if available, else cpu)",
    )


def prepare_out_dir(out: Path, *, resume: bool = False, overwrite: bool = False) -> None:
    """Make sure ``out`` may be written: never silently replace an earlier run."""
    if resume and overwrite:
        raise UsageError("--resume and --overwrite: choose one")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not resume:
        if not overwrite:
            raise UsageError(
                f"{out}: already holds an earlier run; pass --resume to continue it "
                "or --overwrite to replace it (or choose another --out)"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def read_lines(path: str | None) -> list[str]:
    """Lines of ``path`` (or of stdin when ``path`` is None), without line endings."""
    if path is None:
        return [line.rstrip("\r\n") for line in sys.stdin]
    from attnkit.data.readers import read_lines as read_file_lines

    return read_file_lines(path)
