"""Fixtures of the engine tests: the checkpoints and files they convert, shared with tests/interop.

Nothing is downloaded (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import os

import gguf_helpers
import interop_helpers

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# Session fixtures shared with tests/interop.
bpe_checkpoint = interop_helpers.bpe_checkpoint
smollm2 = gguf_helpers.smollm2
smollm2_run = gguf_helpers.smollm2_run
