"""What a run trains and what its checkpoints hold: every weight, or LoRA adapters.

The trainer asks ``weights_for_run(run)`` once and hands the answer on:

* ``FullWeights`` (no ``train.lora``): the model as it is; a checkpoint holds
  the whole state dict and resumes with a strict load.
* ``LoRAWeights`` (``train.lora``): the run starts from a pretrained model
  (``--init``, whose weights the task loaded), ``prepare`` installs the
  adapters (``attnkit.adapters.install_lora``: everything frozen, the targeted
  projections wrapped) and keeps trainable what the base checkpoint does not
  have and any classification head (its pooler too, when the base brought a
  pretrained one), trained in full as PEFT's ``modules_to_save``. A
  checkpoint holds only those trainable tensors plus ``adapter.json``, the
  base's path and SHA-256 from the run's ``init`` record
  (``attnkit.checkpoints.adapters``); a resume loads them into the
  re-installed adapters, whose base the task loaded again from ``--init``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from torch import Tensor, nn

from attnkit.adapters import LoRAConfig, install_lora, lora_parameter_names
from attnkit.checkpoints.adapters import (
    ADAPTER_FILE,
    AdapterInfo,
    BaseReference,
    load_lora_state,
)
from attnkit.checkpoints.files import MODEL_FILE
from attnkit.checkpoints.loading import load_model_state
from attnkit.checkpoints.safe_files import tensor_names
from attnkit.errors import CheckpointError, ConfigError
from attnkit.models.encoder_only import ClassificationHead, TokenClassificationHead
from attnkit.training.runconfig import RunConfig


class RunWeights(Protocol):
    """How a run's model is prepared, saved and restored (see the module doc)."""

    def prepare(self, model: nn.Module) -> None:
        """Make ``model`` (built, with its starting weights) ready to train."""
        ...

    def state(self, model_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """What of the model's full state dict a checkpoint stores."""
        ...

    def files(self) -> dict[str, str]:
        """Extra files of every checkpoint (name -> text)."""
        ...

    def load(self, model: nn.Module, state: Mapping[str, Tensor], *, source: Path) -> None:
        """Put a checkpoint's stored tensors back into the prepared ``model``."""
        ...

    def describe(self) -> str:
        """One line for the start of a run (empty when there is nothing to say)."""
        ...


class FullWeights:
    """Every weight trains; checkpoints hold the whole model."""

    def prepare(self, model: nn.Module) -> None:
        pass

    def state(self, model_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return dict(model_state)

    def files(self) -> dict[str, str]:
        return {}

    def load(self, model: nn.Module, state: Mapping[str, Tensor], *, source: Path) -> None:
        load_model_state(model, state, source=source)

    def describe(self) -> str:
        return ""


class LoRAWeights:
    """Adapters on a frozen base; checkpoints hold what trains and a reference to the base."""

    def __init__(self, config: LoRAConfig, base: BaseReference) -> None:
        self.info = AdapterInfo(config, base)
        self.trained: list[str] = []  # state-dict names of everything that trains
        self.adapted: list[str] = []  # the projections holding adapters
        self.fresh: list[str] = []  # a head or what the base lacks: trained in full

    def prepare(self, model: nn.Module) -> None:
        base_keys = tensor_names(Path(self.info.base.path) / MODEL_FILE)
        params = dict(model.named_parameters())
        # A classification head trains in full (PEFT's modules_to_save), new or not: an
        # imported BERT brings its pretrained pooler, which the new labels are read through.
        heads = {f"{prefix}.{name}" for prefix, module in model.named_modules()
                 if isinstance(module, ClassificationHead | TokenClassificationHead)
                 for name, _ in module.named_parameters()}  # fmt: skip
        self.fresh = [name for name in params if name not in base_keys or name in heads]
        self.adapted = install_lora(model, self.info.lora)
        for name in self.fresh:  # a new head: trained in full
            params[name].requires_grad_(True)
        self.trained = [name for name, p in model.named_parameters() if p.requires_grad]

    def state(self, model_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return {name: model_state[name] for name in self.trained}

    def files(self) -> dict[str, str]:
        return {ADAPTER_FILE: self.info.to_json()}

    def describe(self) -> str:
        lora = self.info.lora
        heads = sorted({name.rsplit(".", 1)[0] for name in self.fresh})
        full = f"; trained in full: {', '.join(heads)}" if heads else ""
        return (
            f"LoRA rank {lora.rank} (alpha {lora.alpha:g}) on {', '.join(lora.targets)}: "
            f"{len(self.adapted)} projections adapted, the base frozen{full}"
        )

    def load(self, model: nn.Module, state: Mapping[str, Tensor], *, source: Path) -> None:
        lora = set(lora_parameter_names(model))
        extra = {k: v for k, v in state.items() if k not in lora}
        expected = set(self.trained) - lora
        if set(extra) != expected:
            raise CheckpointError(
                f"{source}: holds {sorted(extra)[:4]} besides the adapters, the run trains "
                f"{sorted(expected)[:4]}; it comes from another run"
            )
        params = dict(model.named_parameters())
        for name, value in extra.items():
            params[name].data.copy_(value)
        load_lora_state(model, {k: v for k, v in state.items() if k in lora}, source=source)


def weights_for_run(run: RunConfig) -> RunWeights:
    """``LoRAWeights`` for a run with ``train.lora`` (it must start from ``--init``),
    else ``FullWeights``."""
    lora = run.train.lora
    if lora is None:
        return FullWeights()
    init = run.init
    if init is None or init.checkpoint is None or init.sha256 is None:
        raise ConfigError(
            "train.lora: adapts the frozen weights of a pretrained model; start from one "
            "with --init CKPT"
        )
    if run.train.distributed == "fsdp":  # its sharded load expects the whole state dict
        raise ConfigError("train.lora: not with train.distributed=fsdp; use ddp")
    return LoRAWeights(lora, BaseReference(init.checkpoint, init.sha256))
