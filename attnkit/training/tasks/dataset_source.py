"""The one place a run's data source is chosen: files under ``data.dir``, or ``data.hf_dataset``.

``with_dataset(run)`` returns ``run`` itself when it reads files. With
``data.hf_dataset`` it exports the training split (and ``valid_split``) as
JSON lines into the data cache (``attnkit.data.hf_datasets``) and returns a
copy of the run whose ``data.train``/``data.valid`` (translation,
text_classification) or ``data.text`` (lm, mlm, span_corruption) name those
files; every reader, cache and loading mode then works as for files. The run
config the user wrote (``run.json``) keeps ``hf_dataset`` as given.

``TASK_FORMATS`` says which record format (``hf_datasets.FORMATS``) each task
reads: a new task format (token tags, question answering, scored sentence
pairs) adds its format there and its task here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from attnkit.data.cache import Log, default_root
from attnkit.data.hf_datasets import export_split
from attnkit.errors import ConfigError
from attnkit.training.config_tasks import LM_TASKS
from attnkit.training.runconfig import RunConfig

# task -> the record format its reader takes (attnkit.data.hf_datasets.FORMATS)
TASK_FORMATS: dict[str, str] = {
    "translation": "pairs",
    **dict.fromkeys(LM_TASKS, "text"),
    "text_classification": "labelled",
}


def with_dataset(run: RunConfig, *, log: Log | None = None) -> RunConfig:
    """``run`` reading ``data.hf_dataset``'s exported splits (``run`` when it reads files)."""
    hf = run.data.hf_dataset
    if hf is None:
        return run
    fmt = TASK_FORMATS.get(run.task)
    if fmt is None:
        raise ConfigError(f"data.hf_dataset: applies to tasks {', '.join(TASK_FORMATS)}, "
                          f"not {run.task}")  # fmt: skip
    if run.data.corpora:
        raise ConfigError("data.hf_dataset: reads one dataset; remove data.corpora (or use files)")
    data = run.data
    files = {"text": data.text} if run.task in LM_TASKS else {"train": data.train}
    if run.task not in LM_TASKS and data.valid not in ("valid", None):
        files["valid"] = data.valid
    for key, value in files.items():  # a file named beside the dataset would be ignored
        if value not in (None, "train"):
            raise ConfigError(f"data.{key}: data.hf_dataset names the data; remove data.{key} "
                              "(or data.hf_dataset)")  # fmt: skip
    if run.task in LM_TASKS and hf.valid_split is not None:
        raise ConfigError(f"data.hf_dataset.valid_split: the {run.task} task holds out the "
                          "last data.valid_fraction of its text; remove valid_split")  # fmt: skip
    root = Path(run.data.cache_dir) if run.data.cache_dir else default_root()  # as prepared data
    langs = (run.data.src_lang, run.data.tgt_lang)
    train = export_split(hf, hf.split, fmt, root=root, langs=langs, log=log)
    changes: dict[str, object] = {}
    if run.task in LM_TASKS:
        changes["text"] = str(train.path)
    else:
        changes["train"] = str(train.path)
        changes["valid"] = None
        if hf.valid_split is not None:
            valid = export_split(hf, hf.valid_split, fmt, root=root, langs=langs, log=log)
            changes["valid"] = str(valid.path)
    model = dict(run.model)
    if fmt == "labelled" and train.label_names and "label_names" not in model:
        model["label_names"] = list(train.label_names)  # the ClassLabel's order is the output order
    exported = dataclasses.replace(data, **changes)  # type: ignore[arg-type]
    return dataclasses.replace(run, data=exported, model=model)
