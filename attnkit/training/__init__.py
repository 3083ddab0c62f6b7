"""Training pieces: label-smoothed loss, Adam and schedules (§5.3, §5.4), checkpoints.

``import attnkit.training`` needs only torch; safetensors is imported when a
checkpoint is read or written.
"""

from attnkit.training.checkpoint import (
    Checkpoint,
    average_checkpoints,
    capture_rng_state,
    checkpoint_dir,
    latest_checkpoint,
    load_checkpoint,
    load_tensors,
    remove_checkpoint,
    restore_rng_state,
    save_checkpoint,
    save_tensors,
)
from attnkit.training.losses import (
    LossOutput,
    chunked_label_smoothed_cross_entropy,
    label_smoothed_cross_entropy,
)
from attnkit.training.optim import build_optimizer, decay_parameters
from attnkit.training.schedules import SCHEDULES, build_scheduler, noam_lr, warmup_cosine_lr

__all__ = [
    "SCHEDULES",
    "Checkpoint",
    "LossOutput",
    "average_checkpoints",
    "build_optimizer",
    "build_scheduler",
    "capture_rng_state",
    "checkpoint_dir",
    "chunked_label_smoothed_cross_entropy",
    "decay_parameters",
    "label_smoothed_cross_entropy",
    "latest_checkpoint",
    "load_checkpoint",
    "load_tensors",
    "noam_lr",
    "remove_checkpoint",
    "restore_rng_state",
    "save_checkpoint",
    "save_tensors",
    "warmup_cosine_lr",
]
