"""``python experiments/slowed_train.py FACTOR TRAIN-ARGS...``: ``attnkit train`` on a machine
FACTOR times slower.

After each training step it sleeps ``(FACTOR - 1)`` times as long as the step took, so a
time-budgeted run reaches ``1 / FACTOR`` of its steps, as on a slower or busier machine
(issue 21, item 8: a budgeted recipe must hold there). The pause is a trainer callback
injected here (``attnkit.cli.train.run(args, callbacks=...)``): the library and the CLI
carry no test hook. Example, the 30-minute recipe at half speed::

    python experiments/slowed_train.py 2 --config configs/multi30k_de_en_cpu.yaml \\
        --set data.dir=../shared/data/multi30k --out runs/de_en_half_speed
"""

from __future__ import annotations

import sys
import time

from attnkit.cli import train as train_command
from attnkit.cli.main import build_parser


def main(argv: list[str]) -> int:
    factor = float(argv[0])
    if not factor >= 1.0:
        print(f"slowed_train: FACTOR must be >= 1, got {argv[0]}", file=sys.stderr)
        return 2
    last = [time.perf_counter()]

    def pause(event: str, step: int) -> None:
        if event != "train_step":
            return
        took = time.perf_counter() - last[0]
        time.sleep((factor - 1.0) * took)
        last[0] = time.perf_counter()

    args = build_parser().parse_args(["train", *argv[1:]])
    return train_command.run(args, callbacks=[pause])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
