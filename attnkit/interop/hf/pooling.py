"""What a sentence-transformers model directory says about its sentence embeddings.

A sentence-transformers model (``all-MiniLM-L6-v2`` and its kin) is a BERT
directory plus ``modules.json`` (the pipeline: Transformer, Pooling, often
Normalize), ``1_Pooling/config.json`` (``pooling_mode_mean_tokens`` ...) and
``sentence_bert_config.json`` (``max_seq_length``: inputs are cut there, often
shorter than the model's positions). ``sentence_embedding_details`` reads them
into the import record's details, which ``attnkit embed`` takes its defaults
from, so its vectors are the ones ``SentenceTransformer.encode`` gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnkit.checkpoints import safe_files
from attnkit.errors import CheckpointError

if TYPE_CHECKING:
    from attnkit.models.lm_config import EncoderOnlyConfig

_LIMIT = 1 << 20  # these files are a few hundred bytes
_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
          "pooling_mode_max_tokens": "max"}  # fmt: skip


def _read(path: Path) -> Any:
    return safe_files.read_json(path, _LIMIT) if path.is_file() else None


def sentence_embedding_details(root: Path) -> dict[str, object] | None:
    """``{"pooling", "normalize", "max_seq_length"}`` of a sentence-transformers directory,
    or ``None`` for a plain transformers directory."""
    modules = _read(root / "modules.json")
    if not isinstance(modules, list):
        return None
    kinds = {str(m.get("type", "")).rsplit(".", 1)[-1]: m for m in modules if isinstance(m, dict)}
    if "Pooling" not in kinds:
        return None
    folder = str(kinds["Pooling"].get("path") or "1_Pooling")
    config = _read(root / folder / "config.json") or {}
    chosen = [mode for key, mode in _MODES.items() if config.get(key)]
    if len(chosen) != 1:
        where = root / folder / "config.json"
        raise CheckpointError(
            f"{where}: expected exactly one of {', '.join(_MODES)} to be true (attnkit embed "
            f"pools one way), got {chosen or 'none'}"
        )
    bert = _read(root / "sentence_bert_config.json") or {}
    length = bert.get("max_seq_length")
    return {
        "pooling": chosen[0],
        "normalize": "Normalize" in kinds,
        "max_seq_length": length if isinstance(length, int) and length > 0 else None,
    }


@dataclass(frozen=True)
class EmbeddingSettings:
    """How a checkpoint's sentence embeddings are made (``attnkit embed``, ``/v1/embeddings``)."""

    pooling: str  # mean, cls or max
    normalize: bool
    max_len: int  # tokens, [CLS] and [SEP] included


def embedding_settings(directory: Path, config: EncoderOnlyConfig) -> EmbeddingSettings:
    """The settings of the checkpoint in ``directory`` (a run or checkpoint folder): an
    imported sentence-transformers model's own (its import record, in the run folder two
    levels up), else the encoder's pooling, normalised, at its full length."""
    from attnkit.interop.import_writer import read_import_record

    recorded: dict[str, Any] = {}
    for folder in (directory, directory.parent.parent):
        try:
            recorded = read_import_record(folder)["details"].get("sentence_embedding") or {}
        except (CheckpointError, OSError):
            continue
        break
    pooling = recorded.get("pooling") or ("cls" if config.pooling == "first" else "mean")
    length = recorded.get("max_seq_length") or config.max_len
    return EmbeddingSettings(pooling, bool(recorded.get("normalize", True)),
                             min(int(length), int(config.max_len)))  # fmt: skip
