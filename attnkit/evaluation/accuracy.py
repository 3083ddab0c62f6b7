"""Classification scores: accuracy, cross-entropy and per-class accuracy of an image classifier.

One place for the image task's validation and ``attnkit evaluate --images``.

Shapes: ``N`` images, ``C`` channels, ``H``/``W`` size, ``K`` classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class ClassificationScores:
    """Sums over the scored images.

    Attributes:
        loss_sum: cross-entropy with the given label smoothing, summed.
        nll_sum: plain cross-entropy (negative log-likelihood), summed.
        correct: images whose top class is the label.
        total: images scored.
        class_correct: per class, images of that class classified right.
        class_total: per class, images of that class.
        predictions: ``(N,)`` the top class of each image.
    """

    loss_sum: float
    nll_sum: float
    correct: int
    total: int
    class_correct: list[int]
    class_total: list[int]
    predictions: Tensor

    @property
    def accuracy(self) -> float:
        return self.correct / max(self.total, 1)

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.total, 1)

    @property
    def nll(self) -> float:
        return self.nll_sum / max(self.total, 1)


@torch.no_grad()
def classification_scores(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    *,
    num_classes: int,
    batch_size: int = 512,
    label_smoothing: float = 0.0,
) -> ClassificationScores:
    """Score ``model`` (its output has ``.logits`` ``(B, K)``) on ``images`` ``(N, C, H, W)``.

    Runs in eval mode (the model's mode is restored), in batches of ``batch_size``
    on the model's device; half-precision logits are scored in fp32.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss_sum = nll_sum = 0.0
    predictions = []
    for start in range(0, labels.numel(), batch_size):
        x = images[start : start + batch_size].to(device)
        y = labels[start : start + batch_size].to(device)
        logits = model(x).logits
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        loss_sum += float(
            F.cross_entropy(logits, y, label_smoothing=label_smoothing, reduction="sum")
        )
        nll_sum += float(F.cross_entropy(logits, y, reduction="sum"))
        predictions.append(logits.argmax(-1).cpu())
    model.train(was_training)
    predicted = torch.cat(predictions) if predictions else torch.zeros(0, dtype=torch.long)
    right = predicted == labels.cpu()
    class_total = torch.bincount(labels.cpu(), minlength=num_classes)
    class_correct = torch.bincount(labels.cpu()[right], minlength=num_classes)
    return ClassificationScores(
        loss_sum=loss_sum,
        nll_sum=nll_sum,
        correct=int(right.sum()),
        total=labels.numel(),
        class_correct=class_correct.tolist(),
        class_total=class_total.tolist(),
        predictions=predicted,
    )
