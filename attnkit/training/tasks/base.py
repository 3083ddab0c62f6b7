"""The task protocol: what the one trainer (``attnkit.training.loop``) needs from a task.

A task owns its data and its objective; the trainer owns everything else
(optimizer, schedule, precision, gradient accumulation, the non-finite
guard, checkpoints, resume, logging, data parallelism). A task:

* builds its model (``build_model``, from the run's ``model`` section and its
  tokenizer);
* hands the trainer this rank's share of the next global batch
  (``next_batch``), on the task's device, with ``real=False`` for a stand-in
  when the share is empty (a global batch smaller than the world), so that
  every rank still joins the gradient all-reduce;
* computes the loss of a batch as sums (``loss``), so that the trainer can
  normalise by the token count of the whole global batch however it was split;
* evaluates (``evaluate``: validation metrics);
* saves and restores the position of its data stream and its own RNGs
  (``state_dict``/``load_state_dict``), for a bit-exact resume.

The tasks: the table ``attnkit.training.tasks.TASK_CLASSES``, where each
class's ``from_run`` builds it from a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, cast

import numpy as np
import torch
from torch import Tensor, nn

from attnkit.blocks.moe import MoEAux
from attnkit.data.cache import Log
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError
from attnkit.models import AnyModelConfig, build_model
from attnkit.models.config_base import AttentionStackConfig, ModelConfig
from attnkit.training.distributed import DistContext
from attnkit.training.freeze import freeze as freeze_parameters
from attnkit.training.runconfig import RunConfig
from attnkit.training.start_config import config_from_start
from attnkit.training.warm_start import WarmStart

C = TypeVar("C", bound=ModelConfig)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``train.precision`` (None = plain fp32)."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


@dataclass
class TaskContext:
    """Where and how a task runs, set by the trainer.

    Attributes:
        device: this rank's device.
        dist: the data-parallel context (a single process by default).
        fast: ``train.fast`` resolved for the device (a task may take a faster loss).
        amp_dtype: the autocast dtype of forward passes (``None``: plain fp32).
    """

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dist: DistContext = field(default_factory=DistContext)
    fast: bool = False
    amp_dtype: torch.dtype | None = None

    def precision(self) -> AbstractContextManager[None]:
        """The autocast context of forward passes (a no-op for fp32)."""
        return torch.autocast(
            self.device.type,
            dtype=self.amp_dtype or torch.float32,
            enabled=self.amp_dtype is not None,
        )


@dataclass
class LossSums:
    """A batch's loss as sums over its scored tokens.

    Attributes:
        loss: the training objective, summed (a scalar with a graph).
        nll: the negative log-likelihood, summed (for perplexity).
        tokens: how many predictions were scored (tokens, or images for a classifier).
        metrics: per-batch means to log beside the loss (expert utilisation,
            training accuracy); the trainer averages them over the micro-batches
            and ranks of an update, weighted by ``tokens``, into the train record.
    """

    loss: Tensor
    nll: Tensor
    tokens: int
    metrics: dict[str, float] = field(default_factory=dict)


def moe_metrics(moe: MoEAux) -> dict[str, float]:
    """What the train record shows of a mixture-of-experts report.

    ``moe_balance_loss`` (1.0 when routing is uniform), ``moe_z_loss``,
    ``moe_drop_rate`` (assignments over capacity) and ``expert_util_<i>``,
    the share of routed assignments expert ``i`` took (``1 / N`` each when
    balanced; the mean over MoE layers).
    """
    metrics = {
        "moe_balance_loss": float(moe.load_balancing_loss.detach()),
        "moe_z_loss": float(moe.z_loss.detach()),
        "moe_drop_rate": moe.drop_rate,
    }
    for i, share in enumerate(moe.utilisation.tolist()):
        metrics[f"expert_util_{i}"] = float(share)
    return metrics


def with_moe_losses(
    loss: Tensor, nll: Tensor, tokens: int, moe: MoEAux | None, config: AnyModelConfig
) -> LossSums:
    """``LossSums`` whose loss adds the model's weighted MoE auxiliary losses, if any.

    The auxiliary losses are per-batch means (over routed tokens and MoE
    layers), while ``loss`` is a sum that the trainer divides by the update's
    token count. Adding ``tokens * (moe_loss_weight * balance + z_loss_weight
    * z)`` keeps the normalised objective ``mean loss + weighted aux``, with
    micro-batches and ranks weighted by their token counts (as their losses are).
    """
    if moe is None:
        return LossSums(loss, nll, tokens)
    weights = cast(AttentionStackConfig, config)  # a MoE report: an attention-stack model's
    aux = weights.moe_loss_weight * moe.load_balancing_loss + weights.z_loss_weight * moe.z_loss
    return LossSums(loss + aux.to(loss.dtype) * tokens, nll, tokens, moe_metrics(moe))


@dataclass(frozen=True)
class TaskInputs:
    """What a task is built from (``Task.from_run``).

    Attributes:
        run: the run config.
        tokenizer: a given tokenizer (a resumed run's, or the one ``start`` brings);
            ``None``: the task trains one on its data (images need none).
        start: ``--init``: the checkpoint the model starts from.
        log: hears what data preparation does and why.
    """

    run: RunConfig
    tokenizer: Tokenizer | None = None
    start: WarmStart | None = None
    log: Log | None = None


class Task(Protocol):
    """A training objective with its data (see the module doc)."""

    name: ClassVar[str]
    # Adam's defaults for this task when train.betas / train.eps are not set.
    betas: ClassVar[tuple[float, float]]
    eps: ClassVar[float]
    # --init: the checkpoint the model starts from (LoRA reads its base and fresh entries)
    start: WarmStart | None

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """Read the run's data and build the task (``attnkit.training.tasks.TASK_CLASSES``)."""
        ...

    @property
    def model_config(self) -> AnyModelConfig:
        """The validated config of the model the task builds."""
        ...

    @property
    def tokenizer(self) -> Tokenizer | None:
        """The task's tokenizer, saved with every checkpoint; None for images."""
        ...

    def setup(self, context: TaskContext) -> None:
        """Receive the device, the data-parallel context and the precision."""
        ...

    def build_model(self) -> nn.Module:
        """A freshly initialised model (the trainer seeds the RNG first)."""
        ...

    # A batch is the task's own (a TranslationBatch, tensors): the trainer only hands
    # what next_batch returned back to loss, so the protocol leaves its type open.
    def next_batch(self) -> tuple[Any, bool]:
        """This rank's share of the next global batch and whether it is real."""
        ...

    def loss(self, model: nn.Module, batch: Any) -> LossSums:
        """Forward ``batch`` through ``model`` (maybe compiled or wrapped)."""
        ...

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation metrics (``{}`` when there is no validation data)."""
        ...

    def describe(self) -> str:
        """One line about the data and vocabulary, printed when training starts."""
        ...

    def progress(self) -> dict[str, object]:
        """Extra fields for the training log records (e.g. the epoch)."""
        ...

    def state_dict(self) -> dict[str, object]:
        """Where the data stream stands and the task's own RNG states."""
        ...

    def load_state_dict(self, state: dict[str, object]) -> None: ...


def saved_int(state: dict[str, object], key: str) -> int:
    """The counter ``state_dict`` saved under ``key`` (an ``int``; the cast only tells mypy)."""
    return int(cast(int, state[key]))


def saved_rng(state: dict[str, object], key: str) -> Tensor:
    """The generator state ``state_dict`` saved under ``key`` (``Generator.get_state``'s
    tensor), on the CPU as ``uint8``, as ``Generator.set_state`` takes it (a checkpoint
    loaded with ``map_location`` may have moved it)."""
    return cast(Tensor, state[key]).to("cpu", torch.uint8)


def model_config_from_run(
    run: RunConfig,
    *,
    families: tuple[type[C], ...],
    defaults: Mapping[str, object],
    preset: str = "small",
    start: WarmStart | None = None,
    head_fields: tuple[str, ...] = (),
) -> C:
    """The ``model`` section (``family``, a ``preset``, overrides) as a validated config.

    ``families``: the config classes of the families this task trains (the
    first is the default);
    ``defaults``: fields the section may leave out (vocabulary sizes and
    special ids, which follow the tokenizer; an image classifier's classes);
    ``preset``: the preset when the section names none. Errors name ``model.<field>``.

    With ``start`` (``--init``) the checkpoint's config is the model: the
    section may only repeat it or change training-only keys (dropout), and of
    ``defaults`` only ``head_fields`` may differ from it (``attnkit.training.warm_start``).
    """
    names = [config_class.family for config_class in families]
    if start is not None:
        config: C = config_from_start(
            start.config, run.model, task_fields=defaults, head_fields=head_fields,
            families=names,
        )  # fmt: skip
        return config
    fields = dict(run.model)
    family = fields.pop("family", names[0])
    if family not in names:
        raise ConfigError(
            f"model.family: task {run.task} trains {' or '.join(names)}, got {family!r}"
        )
    chosen = fields.pop("preset", preset)
    for name, value in defaults.items():
        fields.setdefault(name, value)
    config_class = families[names.index(family)]
    if not isinstance(chosen, str):  # YAML may give a number: from_preset's refusal, as is
        raise ConfigError(f"model.preset: unknown preset {chosen!r}; choose from "
                          f"{', '.join(config_class.presets)}")  # fmt: skip
    try:
        return config_class.from_preset(chosen, **fields)
    except ConfigError as e:
        raise ConfigError(f"model.{e}") from None


def build_task_model(
    config: ModelConfig,
    start: WarmStart | None = None,
    *,
    head: tuple[str, ...] = (),
    restart: tuple[str, ...] = (),
    freeze: Sequence[str] = (),
) -> nn.Module:
    """A task's model for ``config``: freshly initialised (the trainer seeded the RNG), then,
    with ``start`` (``--init``), given the checkpoint's weights; the modules under the
    prefixes ``head`` keep their fresh initialisation where the checkpoint has none that fit,
    those under ``restart`` (new labels) in any case; ``start`` records which
    (``WarmStart.fresh``). ``freeze``: ``train.freeze`` (``attnkit.training.freeze``)."""
    model = build_model(config)
    if start is not None:
        start.load_weights(model, head=head, restart=restart)
    if freeze:
        freeze_parameters(model, freeze)
    return model


def unknown_note(
    tokenizer: Tokenizer, sides: dict[str, Sequence[Sequence[int]] | Tensor | np.ndarray]
) -> str:
    """``", unknown tokens: 1.20% of source, 0.40% of target"``: the share of ids that the
    tokenizer mapped to its unknown id, per side; ``""`` when there are none.

    A tokenizer trained on the data knows all of it; one that came with a checkpoint
    (``--init``) may not, and the run says so instead of training on ``<unk>`` silently.
    """
    unk = tokenizer.unk_id
    if unk is None:
        return ""
    shares = {}
    for side, ids in sides.items():
        if isinstance(ids, Tensor | np.ndarray):  # all ids, flat
            total, unknown = (
                int(ids.size if isinstance(ids, np.ndarray) else ids.numel()),
                int((ids == unk).sum()),
            )
        else:
            total = sum(len(x) for x in ids)
            unknown = sum(list(x).count(unk) for x in ids)
        shares[side] = unknown / max(total, 1)
    if not any(shares.values()):
        return ""
    parts = ", ".join(f"{100 * share:.2f}% of {side}" for side, share in shares.items())
    return f", unknown tokens (mapped to the tokenizer's unknown id): {parts}"


def check_vocab_fits(config: AnyModelConfig, fields: tuple[str, ...], tokenizer: Tokenizer) -> None:
    """Refuse a model vocabulary smaller than the tokenizer's (an id past the table crashes)."""
    for name in fields:
        if getattr(config, name) < tokenizer.vocab_size:
            raise ConfigError(
                f"model.{name}: {getattr(config, name)} is smaller than the tokenizer's "
                f"vocabulary of {tokenizer.vocab_size}; leave it out (it follows the tokenizer)"
            )


def context_block(block_size: int | None, max_len: int) -> int:
    """The training sequence length: ``data.block_size``, or the model's context
    ``max_len`` when unset; longer than the context is a ``ConfigError``."""
    if block_size is None:
        return max_len
    if block_size > max_len:
        raise ConfigError(
            f"data.block_size: {block_size} is longer than the model's context (max_len {max_len})"
        )
    return block_size
