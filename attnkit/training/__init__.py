"""Training: one trainer (``loop.Trainer``) with task plug-ins (``tasks``), the paper's
loss, optimizer and schedules (§5.3, §5.4), logging, and data parallelism.

``import attnkit.training`` needs only torch; the trainer's own dependencies
(tqdm, safetensors, matplotlib) are imported when it runs.
"""

from attnkit.losses import (
    LossOutput,
    chunked_label_smoothed_cross_entropy,
    label_smoothed_cross_entropy,
)
from attnkit.training.optim import build_optimizer, decay_parameters
from attnkit.training.schedules import SCHEDULES, build_scheduler, noam_lr, warmup_cosine_lr

__all__ = [
    "SCHEDULES",
    "LossOutput",
    "build_optimizer",
    "build_scheduler",
    "chunked_label_smoothed_cross_entropy",
    "decay_parameters",
    "label_smoothed_cross_entropy",
    "noam_lr",
    "warmup_cosine_lr",
]
