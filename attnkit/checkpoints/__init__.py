"""Checkpoints: safe files, run directories, averaging, and loading models back.

A layer below training, the CLI and the server: nothing here imports them.
"""

from attnkit.checkpoints.averaging import average_checkpoints
from attnkit.checkpoints.files import (
    CONFIG_FILE,
    MAX_JSON_BYTES,
    MODEL_FILE,
    OPTIMIZER_FILE,
    TOKENIZER_FILE,
    TRAINER_FILE,
    Checkpoint,
    load_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from attnkit.checkpoints.loading import (
    LoadedModel,
    WrongFamilyError,
    load_model,
    load_model_state,
    load_tokenizer,
)
from attnkit.checkpoints.rundir import (
    checkpoint_dir,
    latest_checkpoint,
    list_checkpoints,
    prune_checkpoints,
    remove_stale_temporaries,
    resolve_checkpoint,
)
from attnkit.checkpoints.safe_files import MAX_HEADER_BYTES, load_tensors, save_tensors

__all__ = [
    "CONFIG_FILE",
    "MAX_HEADER_BYTES",
    "MAX_JSON_BYTES",
    "MODEL_FILE",
    "OPTIMIZER_FILE",
    "TOKENIZER_FILE",
    "TRAINER_FILE",
    "Checkpoint",
    "LoadedModel",
    "WrongFamilyError",
    "average_checkpoints",
    "checkpoint_dir",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_model",
    "load_model_state",
    "load_tensors",
    "load_tokenizer",
    "prune_checkpoints",
    "remove_checkpoint",
    "remove_stale_temporaries",
    "resolve_checkpoint",
    "save_checkpoint",
    "save_tensors",
]
