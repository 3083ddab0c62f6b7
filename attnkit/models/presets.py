"""Named presets, as data (a plain dict: preset name -> field overrides).

``base`` and ``big`` are the paper's Table 3 with its 37k shared BPE
vocabulary (WMT 2014 En-De); ``small`` is a CPU-sized model for tests, the
quickstart and small corpora like Multi30k.
"""

from __future__ import annotations

from typing import Any

TRANSFORMER_PRESETS: dict[str, dict[str, Any]] = {
    "base": {},  # TransformerConfig's defaults are the base model
    "big": {"d_model": 1024, "num_heads": 16, "d_ff": 4096, "dropout": 0.3},
    "small": {
        "d_model": 256,
        "num_heads": 4,
        "d_ff": 1024,
        "num_encoder_layers": 3,
        "num_decoder_layers": 3,
        "max_len": 512,
        "src_vocab_size": 8000,
        "tgt_vocab_size": 8000,
    },
}
