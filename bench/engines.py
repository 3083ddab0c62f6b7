"""Helpers of ``bench/cpu_decode.py``: a model all engines can share, and its exports.

* ``build_model``: the ``base`` preset with a vocabulary laid out for
  CTranslate2's Marian converter, which drops the **last** embedding row
  (Transformers' ``<pad>``) and starts the decoder from a **zero** embedding:
  so ``<pad>`` is the last id, and attnkit's BOS row (its decoder start) is
  zeroed, making the three engines compute the same function.
* ``to_ct2``: attnkit -> ``MarianMTModel`` (``attnkit.interop.hf.marian``) ->
  a CTranslate2 model directory (``TransformersConverter``, fed the in-memory
  model and a stand-in tokenizer that only lists the vocabulary).

``ctranslate2`` and ``transformers`` are imported only when these are called.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import torch

from attnkit.models import EncoderDecoder, TransformerConfig

UNK, BOS, EOS = 0, 1, 2


def vocabulary(size: int) -> list[str]:
    """Token strings: ``<unk> <s> </s> t3 .. t{size-2} <pad>`` (``<pad>`` last, for CT2)."""
    return ["<unk>", "<s>", "</s>", *(f"t{i}" for i in range(3, size - 1)), "<pad>"]


def build_model(vocab: int = 8000, preset: str = "base", seed: int = 0) -> EncoderDecoder:
    """A random ``preset`` model (fixed seed) whose decoder start row is zero, ``<pad>`` last."""
    cfg = TransformerConfig.from_preset(
        preset,
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        dropout=0.0,
        pad_id=vocab - 1,
        bos_id=BOS,
        eos_id=EOS,
        max_len=512,
    )
    torch.manual_seed(seed)
    model = EncoderDecoder(cfg).eval()
    with torch.no_grad():  # CT2 starts Marian decoders from a zero embedding
        model.tgt_embed.tokens.weight[BOS] = 0.0
    return model


def random_source(batch: int, length: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """``(batch, length)`` ids of ordinary tokens (no specials, no padding)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab - 1, (batch, length), generator=g)


class _VocabOnlyTokenizer:
    """What CT2's Marian loader reads from a tokenizer: the vocabulary and two tokens."""

    def __init__(self, tokens: list[str]) -> None:
        self._vocab = {t: i for i, t in enumerate(tokens)}
        self.eos_token, self.unk_token, self.bos_token, self.pad_token = (
            "</s>",
            "<unk>",
            "<s>",
            "<pad>",
        )
        self.special_tokens_map: dict[str, Any] = {}

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)


def to_hf(model: EncoderDecoder) -> Any:
    """The same weights in ``transformers.MarianMTModel`` (eval, fp32), forced EOS off."""
    from attnkit.interop.hf.marian import to_hf_marian

    hf = to_hf_marian(model).eval()
    hf.generation_config.forced_eos_token_id = None
    hf.config.forced_eos_token_id = None
    return hf


def to_ct2(hf: Any, out_dir: str | None = None) -> str:
    """Convert ``hf`` (a ``MarianMTModel``) to a CTranslate2 directory; returns its path."""
    import ctranslate2

    tokens = vocabulary(hf.config.vocab_size)
    src_dir = tempfile.mkdtemp(prefix="attnkit-hf-")
    hf.config.save_pretrained(src_dir)  # the converter reads config.json from here

    class InMemory(ctranslate2.converters.TransformersConverter):
        def load_model(self, model_class: Any, name: str, **kwargs: Any) -> Any:
            return hf

        def load_tokenizer(self, tokenizer_class: Any, name: str, **kwargs: Any) -> Any:
            return _VocabOnlyTokenizer(tokens)

    out_dir = out_dir or os.path.join(tempfile.mkdtemp(prefix="attnkit-ct2-"), "model")
    InMemory(src_dir).convert(out_dir, force=True)
    return out_dir
