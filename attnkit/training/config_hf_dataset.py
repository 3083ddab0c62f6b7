"""``data.hf_dataset``: train on a Hugging Face ``datasets`` dataset named in the config.

``attnkit.data.hf_datasets`` reads it; ``training/tasks/dataset_source.py`` hooks
it into the task's data. Also from the command line:
``--set data.hf_dataset.path=wmt16 --set data.hf_dataset.name=de-en``.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnkit.errors import ConfigError
from attnkit.validation import check_fields, require

__all__ = ["HFDatasetConfig"]


@dataclass
class HFDatasetConfig:
    """A dataset ``datasets.load_dataset`` reads, and which of its columns the task takes.

    ``path``: a Hub dataset (``wmt16``, ``stanfordnlp/sst2``) or a builder for local
    files (``parquet``, ``csv``, ``json``, ``text``) with ``data_files`` (a path, a
    list, or ``{split: path(s)}``); ``name``: its configuration (``de-en``);
    ``revision``: a Hub commit or tag to pin; ``split``/``valid_split``: the
    training and validation splits, any slicing ``datasets`` supports
    (``train[:10%]``; ``train[:1000]`` when streaming); ``streaming``: read the
    records one by one instead of through ``datasets``' own Arrow copy.
    ``columns`` maps the task's roles to columns (translation: ``src``/``tgt``,
    or ``translation`` for a column of ``{lang: text}`` read with ``data.src_lang``
    and ``data.tgt_lang``; lm/mlm: ``text``; text_classification: ``label``,
    ``text``, ``text_b``); roles it leaves out are looked for under their usual
    names. The split is exported once, as JSON lines, into the data cache
    (``data.cache_dir``), and read from there like a file: keyed by ``datasets``'
    own fingerprint of what it read, or, when streaming (a stream has none), by
    the settings here and the local files; pin ``revision`` so that a Hub
    dataset that changes upstream is not mistaken for the one already exported.
    """

    path: str = ""
    name: str | None = None
    split: str = "train"
    valid_split: str | None = None
    data_files: str | list[str] | dict[str, object] | None = None
    columns: dict[str, str] | None = None
    streaming: bool = False
    revision: str | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        require("path", bool(self.path.strip()), "name a dataset (wmt16) or a builder (parquet)")
        require("split", bool(self.split.strip()), "name a split (train)")
        if isinstance(self.data_files, dict):
            for split, files in self.data_files.items():
                ok = isinstance(files, str) or (
                    isinstance(files, list) and all(isinstance(f, str) for f in files)
                )
                if not ok:
                    raise ConfigError(f"data_files.{split}: expected a path or a list of paths, "
                                      f"got {files!r}")  # fmt: skip
        for role, column in (self.columns or {}).items():
            if not isinstance(column, str) or not column:
                raise ConfigError(f"columns.{role}: expected a column name, got {column!r}")
