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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from attnkit.checkpoints.safe_files import PICKLE_SUFFIXES, load_tensors, read_json
from attnkit.errors import CheckpointError

CONFIG, WEIGHTS, INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
TOKENIZER, TOKENIZER_CONFIG = "tokenizer.json", "tokenizer_config.json"
_JSON_LIMIT = 64 << 20
_CONVERT = (
    "convert it with a tool you trust, e.g. transformers: "
    "AutoModel.from_pretrained(DIR).save_pretrained(DIR) writes model.safetensors"
)


@dataclass
class HFDirectory:
    """A model directory's parsed JSON files (weights are read on demand)."""

    path: Path
    config: dict[str, Any]
    tokenizer_config: dict[str, Any] = field(default_factory=dict)

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    def file(self, name: str) -> Path:
        return self.path / name

    def get(self, key: str, default: Any = None) -> Any:
        """A ``config.json`` field (``default`` when absent or null)."""
        value = self.config.get(key)
        return default if value is None else value

    def require(self, key: str) -> Any:
        """A ``config.json`` field that must be there."""
        if self.config.get(key) is None:
            raise CheckpointError(f"{self.file(CONFIG)}: field {key!r} is missing")
        return self.config[key]


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


def read_tokenizer(directory: HFDirectory) -> Any:
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
        json.loads(text)
        return Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises a bare Exception
        raise CheckpointError(f"{path}: not a tokenizers JSON file ({e})") from None


def special_token(directory: HFDirectory, name: str, default: str | None = None) -> str | None:
    """``tokenizer_config.json``'s ``name`` (e.g. ``"cls_token"``) as a string."""
    value = directory.tokenizer_config.get(name, default)
    if isinstance(value, dict):  # an AddedToken serialised as an object
        value = value.get("content")
    return value if isinstance(value, str) else default


def token_id(tokenizer: Any, token: str | None, directory: HFDirectory, role: str) -> int:
    """The id of ``token`` in ``tokenizer``; a one-line error naming the role otherwise."""
    found = None if token is None else tokenizer.token_to_id(token)
    if found is None:
        raise CheckpointError(
            f"{directory.file(TOKENIZER)}: the {role} token {token!r} is not in the vocabulary"
        )
    return int(found)


def special_ids(tokenizer: Any) -> list[int]:
    """Ids of the added tokens the tokenizer marks special (what ``skip_special_tokens`` drops)."""
    data = json.loads(tokenizer.to_str())
    return sorted(int(t["id"]) for t in data.get("added_tokens") or [] if t.get("special"))


def check_shapes(
    state: Mapping[str, Tensor],
    expected: Mapping[str, Tensor],
    origin: Mapping[str, str],
    directory: HFDirectory,
) -> None:
    """Every mapped tensor has the shape the config implies; errors name the HF key."""
    for key, value in state.items():
        want = expected.get(key)
        if want is not None and tuple(value.shape) != tuple(want.shape):
            name = origin.get(key, key)
            raise CheckpointError(
                f"{directory.file(WEIGHTS)}: {name} has shape {tuple(value.shape)} but "
                f"{CONFIG} implies {tuple(want.shape)}; the weights and {CONFIG} come from "
                "different models"
            )


class WeightMap:
    """Builds an attnkit state dict from HF tensors, remembering where each came from.

    ``prefix`` is tried first for every name (``"bert."`` in a
    ``BertForMaskedLM`` file, nothing in a ``BertModel`` one).
    """

    def __init__(self, weights: Mapping[str, Tensor], directory: HFDirectory, prefix: str = ""):
        self.weights, self.directory, self.prefix = weights, directory, prefix
        self.state: dict[str, Tensor] = {}
        self.origin: dict[str, str] = {}

    def name(self, name: str) -> str:
        """The key ``name`` has in the file (with the prefix when the file uses it)."""
        return self.prefix + name if self.prefix + name in self.weights else name

    def has(self, name: str) -> bool:
        return self.name(name) in self.weights

    def get(self, name: str) -> Tensor:
        key = self.name(name)
        if key not in self.weights:
            raise CheckpointError(
                f"{self.directory.file(WEIGHTS)}: tensor {self.prefix + name!r} is missing; "
                f"the file does not hold the model {CONFIG} describes"
            )
        return self.weights[key]

    def put(self, key: str, name: str, value: Tensor | None = None) -> None:
        """``state[key]`` = ``value`` (default: the tensor ``name``), from ``name``."""
        self.state[key] = self.get(name) if value is None else value
        self.origin[key] = self.name(name)
