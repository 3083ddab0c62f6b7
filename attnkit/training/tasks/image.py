"""The image classification task: a Vision Transformer (``model.family: vit``) or a Swin
Transformer (``model.family: swin``) on labelled images.

Data (``data.images``): ``digits``, scikit-learn's bundled 8x8 grey digits;
``lfw_subset``, scikit-image's bundled 200 faces and non-faces (25x25 grey,
resized to the model's ``image_size``); or a folder ``{data.dir}/{images}``
whose labels CSV (``data.labels``, default ``{images}/labels.csv``;
``filename,label`` lines) names its images.
A folder's images are converted to the model's ``channels`` and resized to
its ``image_size``; the digits need ``image_size: 8, channels: 1`` (the
``digits`` preset, the default). The class names (labels sorted as strings;
"0".."9" for the digits) and their number go into the model config, so every
checkpoint carries them. Held out: a stratified ``data.valid_fraction``
(default 0.2, seeded 0 whatever ``train.seed`` is; for the digits that is the
fixed 1,438 / 359 split of ``attnkit.data.images``).

Batches: ``train.max_tokens // seq_len`` images per batch and rank, where an
image is ``seq_len`` tokens (its patches, plus the class token), as the LM
tasks take ``max_tokens // context`` blocks; the digits preset's 5 tokens
make ``max_tokens: 320`` 64 images. An epoch is one pass over the training
images in an order drawn from a generator seeded with ``train.seed``; the
generator's state at the start of the epoch and the position inside it are
saved, so a resumed run draws the same order (bit-exact resume). The last
batch of an epoch may be smaller. Under torchrun every rank cuts the same
global batch and keeps rows ``rank, rank + N, ...``.

Augmentation (off by default): ``data.max_shift`` moves each training image
by up to that many pixels (zero fill), from a second saved generator.

Objective: cross-entropy with ``train.label_smoothing``, summed over images
(the trainer's "tokens" are images here), plus the routers' auxiliary losses
of a mixture-of-experts encoder; the train record carries the batch accuracy.
Validation: held-out ``loss`` (label-smoothed, comparable with training),
``nll`` and ``accuracy``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.data.images import (
    ImageSet,
    load_digits_set,
    load_lfw_subset,
    random_shift,
    read_image_folder,
    stratified_split,
)
from attnkit.errors import ConfigError
from attnkit.evaluation.accuracy import classification_scores
from attnkit.models.swin import SwinConfig
from attnkit.models.vit import ViTConfig
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import (
    LossSums,
    Task,
    TaskContext,
    TaskInputs,
    build_task_model,
    model_config_from_run,
    saved_int,
    saved_rng,
    with_moe_losses,
)
from attnkit.training.warm_start import WarmStart

Batch = tuple[Tensor, Tensor]
SPLIT_SEED = 0  # the held-out split never moves with train.seed
DIGITS = "digits"
LFW = "lfw_subset"
ImageModelConfig = ViTConfig | SwinConfig


# The classes follow the data: they may differ from an --init checkpoint's (new head).
HEAD_FIELDS = ("num_classes", "class_names")


def _image_config(
    run: RunConfig, defaults: dict[str, object], start: WarmStart | None = None
) -> ImageModelConfig:
    families: tuple[type[ViTConfig | SwinConfig], ...] = (ViTConfig, SwinConfig)
    config = model_config_from_run(
        run, families=families, defaults=defaults, preset="digits", start=start,
        head_fields=HEAD_FIELDS,
    )  # fmt: skip
    return cast(ImageModelConfig, config)  # one of the two families


def image_shape(run: RunConfig, start: WarmStart | None = None) -> ImageModelConfig:
    """The model section without its classes (they follow the data): channels and size."""
    fields = {k: v for k, v in run.model.items() if k not in HEAD_FIELDS}
    return _image_config(dataclasses.replace(run, model=fields), {}, start)


def load_images(run: RunConfig, start: WarmStart | None = None) -> tuple[ImageSet, ImageSet | None]:
    """The run's ``(train, held out)`` images (held out ``None`` when ``valid_fraction`` is 0)."""
    data = run.data
    if data.images is None:
        raise ConfigError(
            "data.images: the image_classification task reads 'digits', 'lfw_subset' or a "
            "folder of images with a labels CSV; set data.images"
        )
    shape = image_shape(run, start)
    if data.images == DIGITS:
        if data.labels is not None:
            raise ConfigError("data.labels: the digits carry their own labels; remove it")
        if (shape.image_size, shape.channels) != (8, 1):
            raise ConfigError(
                f"model.image_size: the digits are 8x8 grey images; got image_size "
                f"{shape.image_size}, channels {shape.channels} (use model.preset: digits)"
            )
        everything = load_digits_set()
    elif data.images == LFW:
        if data.labels is not None:
            raise ConfigError("data.labels: lfw_subset carries its own labels; remove it")
        if shape.channels != 1:
            raise ConfigError(
                f"model.channels: lfw_subset is grey (1 channel), got {shape.channels}"
            )
        everything = load_lfw_subset(shape.image_size)
    else:
        folder = Path(data.dir) / data.images
        if not folder.is_dir():
            raise ConfigError(f"data.images: {folder} is not a folder (nor 'digits', '{LFW}')")
        labels = folder / "labels.csv" if data.labels is None else Path(data.dir) / data.labels
        everything = read_image_folder(
            folder, labels, channels=shape.channels, image_size=shape.image_size
        )
    fraction = data.held_out_fraction(run.task)
    if fraction == 0.0:
        return everything, None
    train, held_out = stratified_split(everything.labels, fraction, SPLIT_SEED)
    return everything.subset(train), everything.subset(held_out)


class ImageClassificationTask:
    """Label-smoothed cross-entropy of an image classifier (ViT, Swin) on shuffled batches."""

    name: ClassVar[str] = "image_classification"
    betas: ClassVar[tuple[float, float]] = (0.9, 0.999)  # ViT's Adam (Dosovitskiy et al.)
    eps: ClassVar[float] = 1e-8
    tokenizer: None = None  # images need none; checkpoints carry no tokenizer.json

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """Labelled images (``load_images``); no tokenizer."""
        train_images, held_out = load_images(given.run, given.start)
        return cls(given.run, train_images, held_out, start=given.start)

    def __init__(
        self,
        run: RunConfig,
        train: ImageSet,
        valid: ImageSet | None = None,
        *,
        source: str = "",
        start: WarmStart | None = None,
    ) -> None:
        self.run, self.cfg = run, run.train
        self.start = start  # --init: the checkpoint whose weights the model starts from
        self.train, self.valid, self.source = train, valid, source or str(run.data.images)
        classes = train.classes
        given = run.model.get("num_classes")
        if given is not None and given != len(classes):
            raise ConfigError(
                f"model.num_classes: {given}, but the data has {len(classes)} classes; "
                "leave it out (it follows the data)"
            )
        self.model_config = _image_config(
            run, {"num_classes": len(classes), "class_names": tuple(classes)}, start
        )
        if len(train) == 0:
            raise ConfigError(f"data.images: {self.source} has no training images")
        self.batch_size = max(1, self.cfg.max_tokens // self.model_config.seq_len)
        self.context = TaskContext()
        self.order_rng = torch.Generator().manual_seed(self.cfg.seed)
        self.augment_rng = torch.Generator().manual_seed(self.cfg.seed + 1)
        self.epoch = 0
        self.batch_in_epoch = 0  # batches of this epoch already handed out
        self._draw_order()

    def _draw_order(self) -> None:
        """This epoch's order; the generator's state before it is kept for resume."""
        self._epoch_rng_state = self.order_rng.get_state()
        self.order = torch.randperm(len(self.train), generator=self.order_rng)

    def setup(self, context: TaskContext) -> None:
        self.context = context

    def build_model(self) -> nn.Module:
        return build_task_model(
            self.model_config, self.start, head=("head",), freeze=self.cfg.freeze
        )

    def describe(self) -> str:
        held_out = len(self.valid) if self.valid is not None else 0
        c = self.model_config
        return (
            f"{self.source}: {len(self.train)} training and {held_out} held-out images, "
            f"{c.num_classes} classes, {self.batch_size} images of {c.seq_len} tokens "
            f"({c.num_patches} patches of {c.patch_size}x{c.patch_size}) per batch"
        )

    # -- batches -------------------------------------------------------------------

    def batches_per_epoch(self) -> int:
        return math.ceil(len(self.train) / (self.batch_size * self.context.dist.world_size))

    def next_batch(self) -> tuple[Batch, bool]:
        if self.batch_in_epoch >= self.batches_per_epoch():
            self.epoch += 1
            self.batch_in_epoch = 0
            self._draw_order()
        size = self.batch_size * self.context.dist.world_size
        start = self.batch_in_epoch * size
        index = self.order[start : start + size]
        self.batch_in_epoch += 1
        images = random_shift(self.train.images[index], self.run.data.max_shift, self.augment_rng)
        labels = self.train.labels[index]
        rows = self.context.dist.shard(range(index.numel()))
        real = bool(rows)
        keep = torch.tensor(rows or [0], dtype=torch.long)  # a stand-in: one image, zeroed
        device = self.context.device
        return (images[keep].to(device), labels[keep].to(device)), real

    # -- objective -----------------------------------------------------------------

    def loss(self, model: nn.Module, batch: Batch) -> LossSums:
        images, labels = batch
        with self.context.precision():
            out = model(images)
        logits = out.logits.to(torch.promote_types(out.logits.dtype, torch.float32))
        loss = F.cross_entropy(
            logits, labels, label_smoothing=self.cfg.label_smoothing, reduction="sum"
        )
        nll = F.cross_entropy(logits.detach(), labels, reduction="sum")
        sums = with_moe_losses(loss, nll, labels.numel(), out.moe, self.model_config)
        accuracy = (logits.detach().argmax(-1) == labels).float().mean()
        sums.metrics["accuracy"] = float(accuracy)
        return sums

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Held-out loss (label-smoothed), NLL and accuracy (the same on every rank)."""
        if self.valid is None or len(self.valid) == 0:
            return {}
        scores = classification_scores(
            model,
            self.valid.images,
            self.valid.labels,
            num_classes=self.model_config.num_classes,
            label_smoothing=self.cfg.label_smoothing,
        )
        return {"loss": scores.loss, "nll": scores.nll, "accuracy": scores.accuracy}

    # -- resume --------------------------------------------------------------------

    def progress(self) -> dict[str, object]:
        return {"epoch": round(self.epoch + self.batch_in_epoch / self.batches_per_epoch(), 3)}

    def state_dict(self) -> dict[str, object]:
        return {
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "epoch_rng": self._epoch_rng_state,
            "augment_rng": self.augment_rng.get_state(),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.epoch = saved_int(state, "epoch")
        self.batch_in_epoch = saved_int(state, "batch_in_epoch")
        self.order_rng.set_state(saved_rng(state, "epoch_rng"))
        self._draw_order()  # the same order again, the generator past it
        self.augment_rng.set_state(saved_rng(state, "augment_rng"))
