"""``python tests/training/kill_runner.py EVENT:STEP TRAIN-ARGS...``: ``attnkit train`` that
SIGKILLs itself when the trainer reaches EVENT at STEP.

The crash tests run it in a subprocess. The kill is a trainer callback injected
here (``attnkit.cli.train.run(args, callbacks=...)``), so the library and the
CLI carry no test hook. Events: ``train_step`` (after the backward pass, before
the update) and ``checkpoint_write`` (half-way through writing a checkpoint).
"""

from __future__ import annotations

import os
import signal
import sys

from attnkit.cli import train as train_command
from attnkit.cli.main import build_parser


def main(argv: list[str]) -> int:
    point, _, step = argv[0].partition(":")

    def kill(event: str, at: int) -> None:
        if event == point and at == int(step):
            os.kill(os.getpid(), signal.SIGKILL)

    args = build_parser().parse_args(["train", *argv[1:]])
    return train_command.run(args, callbacks=[kill])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
