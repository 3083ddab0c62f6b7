"""Metrics sinks: metrics.jsonl and loss.png always; TensorBoard events when asked, read back."""

from __future__ import annotations

import json

import pytest

from attnkit.errors import ConfigError
from attnkit.training.logging import RunLog, truncate_metrics


def _events(directory) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_events_hold_what_metrics_jsonl_holds(tmp_path):
    log = RunLog(tmp_path, ("jsonl", "tensorboard"))
    for step in (1, 2, 3):
        log.log({"split": "train", "step": step, "loss": 4.0 - step, "lr": 1e-3, "epoch": 0})
    log.log({"split": "valid", "step": 3, "loss": 1.5, "bleu": 12.5})
    log.log({"split": "skipped", "step": 2, "reason": "non-finite loss"})  # no numbers: none
    log.on_eval()
    log.close()
    events = _events(tmp_path / "tensorboard")
    assert events["train/loss"] == [(1, 3.0), (2, 2.0), (3, 1.0)]
    assert events["valid/bleu"] == [(3, 12.5)]
    assert not any(tag.startswith("skipped/") for tag in events)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["split"] for x in lines] == ["train"] * 3 + ["valid", "skipped"]
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"


def test_a_resumed_log_drops_what_came_after_the_checkpoint(tmp_path):
    log = RunLog(tmp_path, ("jsonl", "tensorboard"))
    for step in range(1, 7):
        log.log({"split": "train", "step": step, "loss": float(step)})
    log.close()
    resumed = RunLog(tmp_path, ("jsonl", "tensorboard"), resume_step=4)  # killed after step 6
    assert [r["step"] for r in resumed.records] == [1, 2, 3, 4]
    for step in (5, 6):
        resumed.log({"split": "train", "step": step, "loss": 10.0 * step})
    resumed.close()
    events = _events(tmp_path / "tensorboard")["train/loss"]
    assert events == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 50.0), (6, 60.0)]


def test_a_torn_last_line_is_dropped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "lo', encoding="utf-8")
    assert truncate_metrics(path, 5) == [{"step": 1, "loss": 1.0}]


def test_only_rank_0_logs(tmp_path):
    log = RunLog(tmp_path, ("jsonl", "tensorboard"), enabled=False)
    log.log({"split": "train", "step": 1, "loss": 1.0})
    log.on_eval()
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_sink_is_refused_by_name():
    from attnkit.training.runconfig import RunConfig

    with pytest.raises(ConfigError, match=r"^train\.log_to\[1\]: expected one of jsonl, tensorb"):
        RunConfig.from_dict({"train": {"log_to": ["jsonl", "wandb"]}})
    assert RunConfig.from_dict({"train": {"log_to": ["jsonl", "tensorboard"]}}).train.log_to == (
        "jsonl",
        "tensorboard",
    )
