"""Reading a Hugging Face model directory safely: config, weights, tokenizer.

Nothing here imports ``transformers`` or unpickles anything. Weights come
only from ``model.safetensors`` (or its shards, ``model.safetensors.index.json``)
through ``attnkit.checkpoints.safe_files``, which validates a file before
parsing it. A directory holding only a pickle-format file
(``pytorch_model.bin``, ``*.pt``) gets a one-line error naming that file and
how to convert it; the file is never opened.

Every error is a ``CheckpointError`` naming the file and what to do.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from torch import Tensor

from attnkit.checkpoints.safe_files import PICKLE_SUFFIXES, load_tensors, read_json
from attnkit.data.hf_ids import check_hf_ids
from attnkit.errors import CheckpointError, ConfigError
from attnkit.interop.keymap import plan_load
from attnkit.interop.keytable import Dims, Table

if TYPE_CHECKING:
    import tokenizers

CONFIG, WEIGHTS, INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
TOKENIZER, TOKENIZER_CONFIG = "tokenizer.json", "tokenizer_config.json"
_JSON_LIMIT = 64 << 20
C = TypeVar("C")
_CONVERT = (
    "convert it with a tool you trust, e.g. transformers: "
    "AutoModel.from_pretrained(DIR).save_pretrained(DIR) writes model.safetensors"
)


@dataclass
class HFDirectory:
    """A model directory's parsed JSON files (weights are read on demand)."""

    path: Path
    config: dict[str, object]
    tokenizer_config: dict[str, object] = field(default_factory=dict)

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    def file(self, name: str) -> Path:
        return self.path / name

    def get(self, key: str, default: object = None) -> Any:
        """A ``config.json`` field (``default`` when absent or null)."""
        value = self.config.get(key)
        return default if value is None else value

    def require(self, key: str) -> object:
        """A ``config.json`` field that must be there."""
        if self.config.get(key) is None:
            raise CheckpointError(f"{self.file(CONFIG)}: field {key!r} is missing")
        return self.config[key]

    def error(self, key: str, message: str) -> CheckpointError:
        """A one-line error naming ``config.json`` and the field ``key``."""
        return CheckpointError(f"{self.file(CONFIG)}: {key}: {message}")

    def integer(self, key: str, default: int | None = None, *, least: int = 1) -> int:
        """An integer field (a size by default: ``least=1``); absent: ``default`` or an error."""
        value = self.require(key) if default is None else self.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(key, f"expected an integer, got {value!r}")
        if value < least:
            raise self.error(key, f"must be >= {least}, got {value}")
        return value

    def number(self, key: str, default: float) -> float:
        """A finite number field (``default`` when absent)."""
        value = self.get(key, default)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value):
            raise self.error(key, f"expected a finite number, got {value!r}")
        return float(value)

    def build(self, config_class: type[C], **fields: object) -> C:
        """``config_class(**fields)``; a refusal of attnkit's validator names ``config.json``."""
        try:
            return config_class(**fields)
        except ConfigError as e:
            raise CheckpointError(
                f"{self.file(CONFIG)}: describes no attnkit model ({e})"
            ) from None

    def dims(self, values: dict[str, int], fields: dict[str, str]) -> Dims:
        """``Dims`` for the key table, each size named by its ``config.json`` field."""
        return Dims(values, fields, CONFIG)


def open_directory(path: str | Path) -> HFDirectory:
    """Read ``config.json`` (and ``tokenizer_config.json`` if present) of ``path``."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(
            f"{path}: not a directory; pass a Hugging Face model directory (config.json, "
            "model.safetensors, tokenizer.json)"
        )
    config_file = path / CONFIG
    if not config_file.is_file():
        raise CheckpointError(
            f"{config_file}: not found; {path} is not a Hugging Face model directory "
            "(expected config.json, model.safetensors and tokenizer.json)"
        )
    config = read_json(config_file, _JSON_LIMIT)
    if not isinstance(config, dict) or "model_type" not in config:
        raise CheckpointError(
            f"{config_file}: no 'model_type' field; not a transformers model config"
        )
    tok_config = {}
    if (path / TOKENIZER_CONFIG).is_file():
        loaded = read_json(path / TOKENIZER_CONFIG, _JSON_LIMIT)
        tok_config = loaded if isinstance(loaded, dict) else {}
    return HFDirectory(path, config, tok_config)


def _pickles(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file())


def read_weights(directory: HFDirectory) -> dict[str, Tensor]:
    """Every tensor of ``model.safetensors`` (or of its shards); never a pickle."""
    path = directory.path
    if (path / WEIGHTS).is_file():
        return load_tensors(path / WEIGHTS)
    if (path / INDEX).is_file():
        index = read_json(path / INDEX, _JSON_LIMIT)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{path / INDEX}: no 'weight_map' object")
        tensors: dict[str, Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            if Path(shard).name != shard:
                raise CheckpointError(f"{path / INDEX}: shard name {shard!r} leaves the directory")
            tensors.update(load_tensors(path / shard))
        return tensors
    pickles = _pickles(path)
    if pickles:
        raise CheckpointError(
            f"{path / pickles[0]}: a pickle-based checkpoint, which attnkit never loads "
            f"(unpickling can run code) and no {WEIGHTS} beside it; {_CONVERT}"
        )
    raise CheckpointError(f"{path / WEIGHTS}: not found; the directory holds no weights")


def read_tokenizer(directory: HFDirectory) -> tokenizers.Tokenizer:
    """The directory's ``tokenizer.json`` as a ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer

    path = directory.file(TOKENIZER)
    if not path.is_file():
        raise CheckpointError(
            f"{path}: not found; attnkit imports the fast tokenizer file: write it with "
            "transformers (AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)) "
            "where the tokenizer has a fast version"
        )
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise CheckpointError(f"{path}: not a tokenizers JSON file ({e})") from None
    check_hf_ids(data, str(path))  # before tokenizers sizes its tables by the largest id
    try:
        return Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises a bare Exception
        raise CheckpointError(f"{path}: not a tokenizers JSON file ({e})") from None


def special_token(directory: HFDirectory, name: str, default: str | None = None) -> str | None:
    """``tokenizer_config.json``'s ``name`` (e.g. ``"cls_token"``) as a string."""
    value = directory.tokenizer_config.get(name, default)
    if isinstance(value, dict):  # an AddedToken serialised as an object
        value = value.get("content")
    return value if isinstance(value, str) else default


def token_id(
    tokenizer: tokenizers.Tokenizer, token: str | None, directory: HFDirectory, role: str
) -> int:
    """The id of ``token`` in ``tokenizer``; a one-line error naming the role otherwise."""
    found = None if token is None else tokenizer.token_to_id(token)
    if found is None:
        raise CheckpointError(
            f"{directory.file(TOKENIZER)}: the {role} token {token!r} is not in the vocabulary"
        )
    return int(found)


def special_ids(tokenizer: tokenizers.Tokenizer) -> list[int]:
    """Ids of the added tokens the tokenizer marks special (what ``skip_special_tokens`` drops)."""
    data = json.loads(tokenizer.to_str())
    return sorted(int(t["id"]) for t in data.get("added_tokens") or [] if t.get("special"))


def map_weights(
    directory: HFDirectory, weights: dict[str, Tensor], table: Table, dims: Dims
) -> dict[str, Tensor]:
    """Our state dict from the directory's ``weights`` through ``table`` (``keymap``).

    Every tensor is placed and every count and shape checked against ``dims``
    before any is converted; ``weights`` is emptied as they are.
    """
    shapes = {key: tuple(value.shape) for key, value in weights.items()}
    plan = plan_load(table, shapes, dims, str(directory.file(WEIGHTS)))
    state, _ = plan.load(weights.pop)
    return state
