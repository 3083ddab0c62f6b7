"""Where a run's metrics go: trainer plug-ins, chosen by ``train.log_to``.

Every record is a flat dict (``{"split": "train", "step": 100, "loss": ...}``).
``RunLog`` hands each one to its sinks:

* ``JsonlSink`` (always): appends a line to ``OUT/metrics.jsonl``; on resume
  it cuts the file back to the checkpoint's step (a torn last line from a
  kill is dropped) and keeps the records for the plot;
* ``LossPlotSink`` (always): redraws ``OUT/loss.png`` at every evaluation;
* ``TensorBoardSink`` (``log_to: [jsonl, tensorboard]``): scalar events under
  ``OUT/tensorboard/`` (``torch.utils.tensorboard``; the ``tensorboard``
  package, in the ``tensorboard`` extra), one tag per split and metric
  (``train/loss``, ``valid/bleu``); a resumed run purges events past its step.

Only rank 0 logs under torchrun (``RunLog(enabled=False)`` elsewhere).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from attnkit import jsonio
from attnkit.errors import ConfigError

Record = dict[str, Any]


class Sink(Protocol):
    def write(self, record: Record) -> None: ...

    def on_eval(self) -> None: ...

    def close(self) -> None: ...


def truncate_metrics(path: str | Path, last_step: int) -> list[Record]:
    """Cut a run's ``metrics.jsonl`` back to the records up to ``last_step`` (on resume).

    Blank or torn lines (a kill mid-write) are dropped. The file is rewritten
    through a temporary and a rename; the kept records are returned.
    """
    path = Path(path)
    if not path.exists():
        return []
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("step", 0) <= last_step:
            kept.append(record)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(jsonio.dumps(r) + "\n" for r in kept), encoding="utf-8")
    tmp.replace(path)
    return kept


class JsonlSink:
    """``metrics.jsonl``: one JSON object per line, appended as it happens."""

    def __init__(self, out_dir: Path, *, resume_step: int | None = None) -> None:
        self.path = out_dir / "metrics.jsonl"
        self.records: list[Record] = []
        if resume_step is not None:
            self.records = truncate_metrics(self.path, resume_step)

    def write(self, record: Record) -> None:
        self.records.append(record)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(jsonio.dumps(record) + "\n")

    def on_eval(self) -> None:
        pass

    def close(self) -> None:
        pass


class LossPlotSink:
    """``loss.png``: training and validation loss against step, redrawn at each evaluation."""

    def __init__(self, out_dir: Path, records: list[Record]) -> None:
        self.path = out_dir / "loss.png"
        self.records = records  # the JSONL sink's list, shared

    def write(self, record: Record) -> None:
        pass

    def on_eval(self) -> None:
        try:
            from attnkit.visualize.curves import plot_curves
        except ImportError:  # matplotlib is optional for the library
            return
        plot_curves(self.records, self.path)

    def close(self) -> None:
        pass


class TensorBoardSink:
    """TensorBoard scalar events: tag ``{split}/{metric}`` at the record's step."""

    def __init__(self, out_dir: Path, *, resume_step: int | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError(
                "train.log_to: tensorboard needs the tensorboard package: "
                "pip install 'attnkit[tensorboard]'"
            ) from None
        # purge_step drops events a killed run wrote after its last checkpoint.
        purge = None if resume_step is None else resume_step + 1
        self.writer = SummaryWriter(str(out_dir / "tensorboard"), purge_step=purge)

    def write(self, record: Record) -> None:
        split, step = record.get("split", "train"), int(record.get("step", 0))
        for key, value in record.items():
            if key in ("split", "step") or isinstance(value, bool):
                continue
            if isinstance(value, int | float) and math.isfinite(value):
                self.writer.add_scalar(f"{split}/{key}", value, step)

    def on_eval(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class RunLog:
    """The run's metrics, fanned out to the sinks ``log_to`` asks for."""

    def __init__(
        self,
        out_dir: str | Path,
        log_to: Sequence[str] = ("jsonl",),
        *,
        enabled: bool = True,
        resume_step: int | None = None,
    ) -> None:
        self.enabled = enabled
        self.sinks: list[Sink] = []
        self.records: list[Record] = []
        if not enabled:
            return
        out = Path(out_dir)
        jsonl = JsonlSink(out, resume_step=resume_step)
        self.records = jsonl.records
        self.sinks = [jsonl, LossPlotSink(out, jsonl.records)]
        if "tensorboard" in log_to:
            self.sinks.append(TensorBoardSink(out, resume_step=resume_step))

    def log(self, record: Record) -> None:
        for sink in self.sinks:
            sink.write(record)

    def on_eval(self) -> None:
        for sink in self.sinks:
            sink.on_eval()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
