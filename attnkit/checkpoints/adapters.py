"""LoRA checkpoints (``attnkit.adapters`` on disk): adapters, a reference to their base.

A LoRA run's checkpoint directory is an ordinary one (``attnkit.checkpoints.files``)
with two differences:

* ``model.safetensors`` holds only what the run trained (``adapter_state``:
  the ``lora_A``/``lora_B`` matrices, and any head trained beside them), a
  few MB instead of the whole model;
* ``adapter.json`` says how to rebuild the rest::

      {"format": 2,
       "lora": {"rank": 8, "alpha": 16.0, "dropout": 0.0, "targets": ["q", "v"]},
       "base": {"path": "/abs/runs/smollm2", "sha256": "<of its model.safetensors' tensors>"}}

Format 1 was written before the modules declared their roles
(``attnkit.roles``), when LoRA never reached cross-attention (nor linear
attention); such a checkpoint holds no adapters there, and loading it leaves
those projections as the base has them. Format 2 holds every targeted
projection's adapters, and a missing one is an error.

``config.json`` and ``tokenizer.json`` are the fine-tuned model's, as in
every checkpoint. Loading (``adapted_weights``) finds the base checkpoint
(the recorded path, or one given instead), hashes its weights file and refuses
another base with a one-line ``CheckpointError``; the base tensors, the
trained extras, then the adapters go into the model, and for inference the
adapters are merged (``merge_lora``), so every command sees an ordinary model
of its family. ``attnkit merge`` writes that merged model as a full checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from attnkit import jsonio
from attnkit.adapters.config import LoRAConfig
from attnkit.adapters.install import (
    adapted_projection,
    adapter_state,
    install_lora,
    lora_parameter_names,
    merge_lora,
)
from attnkit.adapters.targets import find_targets, selected
from attnkit.checkpoints import safe_files
from attnkit.checkpoints.digest import weights_digest
from attnkit.checkpoints.files import MODEL_FILE, save_checkpoint
from attnkit.checkpoints.rundir import resolve_checkpoint
from attnkit.errors import CheckpointError, ConfigError

ADAPTER_FILE = "adapter.json"
ADAPTER_FORMAT = 2
# Format 1: before cross-attention (and linear attention) had adapters; read leniently.
READABLE_FORMATS = (1, 2)
_MAX_ADAPTER_JSON = 1 << 20


def weights_sha256(checkpoint: str | Path) -> str:
    """The content SHA-256 (``attnkit.checkpoints.digest``) of a checkpoint directory's
    ``model.safetensors`` (hex): what a LoRA checkpoint records of its base."""
    return weights_digest(Path(checkpoint) / MODEL_FILE).content


@dataclass(frozen=True)
class BaseReference:
    """Where a LoRA checkpoint's frozen weights live: a checkpoint directory and its hash."""

    path: str
    sha256: str

    @classmethod
    def of(cls, checkpoint: str | Path) -> BaseReference:
        """The reference to ``checkpoint`` (a checkpoint or run directory) as it is now."""
        directory = resolve_checkpoint(checkpoint).resolve()
        if (directory / ADAPTER_FILE).exists():
            raise CheckpointError(
                f"{directory}: is itself a LoRA checkpoint; merge it first "
                f"(attnkit merge --checkpoint {directory} --out DIR) and start from that"
            )
        return cls(str(directory), weights_sha256(directory))


@dataclass(frozen=True)
class AdapterInfo:
    """The contents of ``adapter.json``."""

    lora: LoRAConfig
    base: BaseReference
    format: int = ADAPTER_FORMAT

    def to_json(self) -> str:
        data = {"format": self.format, "lora": self.lora.to_dict(),
                "base": {"path": self.base.path, "sha256": self.base.sha256}}  # fmt: skip
        return jsonio.dumps(data, indent=2) + "\n"


def read_adapter_info(directory: str | Path) -> AdapterInfo | None:
    """``adapter.json`` of a checkpoint directory, or ``None`` for an ordinary checkpoint."""
    path = Path(directory) / ADAPTER_FILE
    if not path.exists():
        return None
    data: Any = safe_files.read_json(path, _MAX_ADAPTER_JSON)
    try:
        if data["format"] not in READABLE_FORMATS:
            raise CheckpointError(
                f"{path}: adapter format {data['format']!r}; this attnkit reads "
                f"{' and '.join(map(str, READABLE_FORMATS))}"
            )
        base = data["base"]
        reference = BaseReference(str(base["path"]), str(base["sha256"]))
        return AdapterInfo(LoRAConfig.from_dict(data["lora"]), reference, int(data["format"]))
    except (KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: not an adapter description (missing {e})") from None
    except ConfigError as e:
        raise CheckpointError(f"{path}: {e}") from None


def _is_lora(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


@dataclass
class AdaptedWeights:
    """A LoRA checkpoint's tensors, split by where they go (see ``adapted_weights``).

    Attributes:
        info: ``adapter.json``.
        model_state: the base's tensors with the trained extras (a new head)
            on top: a plain model's state dict, for a strict load.
        lora_state: the adapters' ``A`` and ``B``, loaded after ``install_lora``.
        source: the adapter file, named in errors.
    """

    info: AdapterInfo
    model_state: dict[str, Tensor]
    lora_state: dict[str, Tensor]
    source: Path

    def install(self, model: nn.Module, *, merge: bool) -> None:
        """Install the adapters on ``model`` (already holding ``model_state``), load
        them, and fold them into the weights when ``merge``."""
        skip = legacy_skip(model, self.info, self.lora_state)
        try:  # a crafted adapter.json (a rank of 3,000,000) is refused before allocating
            install_lora(model, self.info.lora, skip=skip)
        except ConfigError as e:
            raise CheckpointError(f"{self.source}: {e}") from None
        load_lora_state(model, self.lora_state, source=self.source)
        if merge:
            merge_lora(model)


def legacy_skip(model: nn.Module, info: AdapterInfo, state: Mapping[str, Tensor]) -> set[str]:
    """The targeted projections a format-1 checkpoint has no adapters for (cross-attention:
    see the module doc), to install none there; nothing for the current format."""
    if info.format >= 2:
        return set()
    held = {adapted_projection(name) for name in state}
    targeted = {t.name for t in find_targets(model) if selected(t, info.lora.targets)}
    return targeted - held


def load_lora_state(model: nn.Module, state: Mapping[str, Tensor], *, source: Path) -> None:
    """Copy ``state`` into ``model``'s adapters; their names and shapes must match exactly."""
    params = dict(model.named_parameters())
    expected = set(lora_parameter_names(model))
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise CheckpointError(
            f"{source}: the adapters do not fit the model: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}"
        )
    for name, value in state.items():
        if value.shape != params[name].shape:
            raise CheckpointError(
                f"{source}: {name} has shape {tuple(value.shape)}, the model's adapter "
                f"{tuple(params[name].shape)}"
            )
        params[name].data.copy_(value)


def adapted_weights(
    directory: str | Path,
    tensors: Mapping[str, Tensor],
    model_keys: set[str],
    *,
    base: str | Path | None = None,
) -> AdaptedWeights | None:
    """The weights of a LoRA checkpoint ``directory`` whose ``model.safetensors`` held
    ``tensors``, for a model whose plain state-dict keys are ``model_keys``;
    ``None`` for an ordinary checkpoint.

    ``base`` replaces the recorded base path (a moved base); either way its
    weights must hash to the recorded SHA-256. Base tensors the model does not
    have (a head the fine-tuned model replaced) are left out.
    """
    info = read_adapter_info(directory)
    if info is None:
        return None
    source = Path(directory) / ADAPTER_FILE
    base_dir = Path(base) if base is not None else Path(info.base.path)
    if base is not None and base_dir.is_dir() and not (base_dir / MODEL_FILE).exists():
        base_dir = resolve_checkpoint(base_dir)  # a run directory: its latest checkpoint
    if not (base_dir / MODEL_FILE).is_file():
        raise CheckpointError(
            f"{source}: its base checkpoint {base_dir} is not there (no {MODEL_FILE}); "
            "pass the base's new place (--base) or merge the adapters where the base is"
        )
    digest = weights_digest(base_dir / MODEL_FILE)
    if not digest.matches(info.base.sha256):
        raise CheckpointError(
            f"{source}: {base_dir} is not the base these adapters were trained on "
            f"(weights sha256 {digest.content[:12]}..., expected {info.base.sha256[:12]}...)"
        )
    base_state = safe_files.load_tensors(base_dir / MODEL_FILE)
    lora_state = {k: v for k, v in tensors.items() if _is_lora(k)}
    extras = {k: v for k, v in tensors.items() if not _is_lora(k)}
    model_state = {k: v for k, v in base_state.items() if k in model_keys}
    model_state.update(extras)
    return AdaptedWeights(info, model_state, lora_state, source)


def save_lora_checkpoint(
    directory: str | Path,
    model: nn.Module,
    info: AdapterInfo,
    *,
    config: Mapping[str, object],
    tokenizer_json: str | None = None,
    **extra: Any,
) -> Path:
    """Write a LoRA checkpoint of ``model`` (adapters installed) atomically: its
    ``adapter_state``, ``adapter.json`` and the rest as ``save_checkpoint`` writes it
    (``extra``: its trainer and optimizer state, ``during_write``)."""
    return save_checkpoint(
        directory,
        model_state=adapter_state(model),
        config=config,
        tokenizer_json=tokenizer_json,
        extra_files={ADAPTER_FILE: info.to_json()},
        **extra,
    )
