"""``TransformerConfig``: the one typed, validated config of the encoder-decoder family.

Variants are strings (``norm_position="pre"``, ``positions="learned"``), so a
config is plain data: it round-trips through JSON and travels inside every
checkpoint. Bad values raise ``ConfigError`` (a ``ValueError``) naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from attnkit.models.config_base import AttentionStackConfig, check_special_ids
from attnkit.models.presets import TRANSFORMER_PRESETS
from attnkit.validation import at_least, require

# "decoder": target embedding = output projection; "inputs": one embedding for source and
# target, the output projection apart (T5 v1.1); "all": the three share one matrix (§3.4).
ShareEmbeddings = Literal["none", "decoder", "inputs", "all"]


@dataclass(frozen=True)
class TransformerConfig(AttentionStackConfig):
    """The encoder-decoder Transformer. Defaults are the paper's base model (Table 3).

    Presets (data, ``attnkit.models.presets``): ``"base"``, ``"big"`` (the
    paper's Table 3), ``"small"`` (CPU-sized) or ``"t5_small_cpu"`` (T5's
    options at CPU size). ``scale_output``: the decoder's output times
    ``d_model**-0.5`` before the output projection, as T5 does when that
    projection is the (unscaled) embedding matrix. ``bos_id`` may equal
    ``pad_id`` (T5 starts the decoder from ``<pad>``): target padding is then
    found after the first position only.
    """

    family: ClassVar[str] = "transformer"
    presets: ClassVar[dict[str, dict[str, object]]] = TRANSFORMER_PRESETS

    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    src_vocab_size: int = 37000
    tgt_vocab_size: int = 37000
    share_embeddings: ShareEmbeddings = "all"
    scale_output: bool = False
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def _check_family(self) -> None:
        at_least(self, ("num_encoder_layers", "num_decoder_layers"), 1)
        specials = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        if self.bos_id == self.pad_id:
            del specials["bos_id"]  # T5's decoder starts from <pad>: allowed, see the class doc
        check_special_ids(
            specials,
            {"src_vocab_size": self.src_vocab_size, "tgt_vocab_size": self.tgt_vocab_size},
        )
        require(
            "share_embeddings",
            self.share_embeddings not in ("all", "inputs")
            or self.src_vocab_size == self.tgt_vocab_size,
            f"{self.share_embeddings!r} needs one shared vocabulary, but "
            f"src_vocab_size={self.src_vocab_size} != tgt_vocab_size={self.tgt_vocab_size}",
        )
