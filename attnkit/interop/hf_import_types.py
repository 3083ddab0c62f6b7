"""What each Hugging Face importer hands back to ``attnkit.interop.hf_import``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer


@dataclass
class Imported:
    """An imported model before it is checked and written.

    Attributes:
        config: the attnkit family config (``TransformerConfig``, ``EncoderOnlyConfig``, ...).
        state: attnkit state-dict key -> tensor (tied keys share one tensor).
        origin: attnkit key -> the HF key it came from (for error messages).
        tokenizer: the model's own tokenizer with the config's special ids.
        notes: what the import could not carry over exactly, in words.
    """

    config: Any
    state: dict[str, Tensor]
    origin: dict[str, str]
    tokenizer: PretrainedTokenizer
    notes: list[str] = field(default_factory=list)
