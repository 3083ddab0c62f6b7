"""An imported model's own tokenizer: any HF ``tokenizers.Tokenizer`` with its special ids.

The tokenizers attnkit trains use pad 0, BOS 1, EOS 2, unk 3. A pretrained
model comes with its vocabulary as it is: BERT has ``[PAD]`` 0,
``[CLS]`` 101, ``[SEP]`` 102, ``[MASK]`` 103; GPT-2 one ``<|endoftext|>``.
``PretrainedTokenizer`` wraps such a ``tokenizer.json`` unchanged and carries
the ids the model's config uses (``pad_id``, ``bos_id``, ``eos_id``,
``unk_id``, optionally ``mask_id``), as every ``Tokenizer`` does.

Conventions are attnkit's, so every command treats it like the others:

* ``encode`` adds no special tokens (collation and the searches do), and
  ignores the file's padding and truncation settings; for BERT,
  ``[bos_id] + encode(text) + [eos_id]`` is what ``transformers`` gives for
  ``tokenizer(text)["input_ids"]`` (``[CLS] ... [SEP]``);
* ``decode`` drops ``skip_ids`` (the tokens the original tokenizer marks as
  special and would skip, e.g. ``<s>``/``</s>``/``<pad>``), keeps the rest
  (an unknown token shows as its text), then detokenizes with the file's own
  decoder. Only real special tokens are dropped: GPT-2 has no pad token, so
  its importer names ordinary ids as the config's ``pad_id``/``bos_id``
  (never fed, see ``attnkit.interop.hf.gpt2``), and those must stay in text;
* ``encode_special_tokens``: whether text such as ``"<s>"`` is encoded as
  characters (attnkit's own BPE does so) rather than as the special token
  (Hugging Face's default: SmolLM2's ``"<|im_start|>"`` is one id);
* ``chat_template`` (a Jinja string, or ``None``) travels with the
  tokenizer's JSON (the GGUF importer keeps the file's); nothing in attnkit
  needs it to run.

Checkpoints saved before this class took over GGUF imports hold kind
``"hf"``; ``attnkit.data.tokenizer_kinds`` reads them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

from attnkit.data.tokenizers import (
    Offsets,
    Tokenizer,
    hf_batch_ids,
    hf_batch_offsets,
    hf_tokenizer_from_json,
)
from attnkit.errors import DataError

if TYPE_CHECKING:
    import tokenizers as hf_tokenizers


class PretrainedTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` from a pretrained model, with explicit special ids."""

    kind = "pretrained"

    def __init__(
        self,
        hf_tokenizer: hf_tokenizers.Tokenizer,
        *,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        unk_id: int | None,
        mask_id: int | None = None,
        skip_ids: Sequence[int] = (),
        encode_special_tokens: bool = False,
        chat_template: str | None = None,
    ):
        super().__init__(pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, unk_id=unk_id,
                         mask_id=mask_id)  # fmt: skip
        self._hf = hf_tokenizer
        self._hf.no_padding()  # attnkit pads batches itself
        self._hf.no_truncation()
        self._hf.encode_special_tokens = encode_special_tokens
        self.skip_ids = frozenset(int(i) for i in skip_ids)
        self.chat_template = chat_template
        size = self.vocab_size
        named = {"pad_id": pad_id, "bos_id": bos_id, "eos_id": eos_id, "unk_id": unk_id,
                 "mask_id": mask_id}  # fmt: skip
        for name, value in named.items():
            if value is not None and not 0 <= value < size:
                raise DataError(f"pretrained tokenizer: {name}={value} is outside 0..{size - 1}")

    @property
    def vocab_size(self) -> int:
        return int(self._hf.get_vocab_size(with_added_tokens=True))

    @property
    def hf_tokenizer(self) -> hf_tokenizers.Tokenizer:
        """The wrapped ``tokenizers.Tokenizer`` (padding and truncation off)."""
        return self._hf

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` in the vocabulary, or ``None``."""
        found = self._hf.token_to_id(token)
        return None if found is None else int(found)

    def encode(self, text: str) -> list[int]:
        return list(self._hf.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return hf_batch_ids(self._hf, texts)

    def encode_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], Offsets]]:
        return hf_batch_offsets(self._hf, texts)

    def decode(self, ids: Sequence[int]) -> str:
        kept = [int(i) for i in ids if int(i) not in self.skip_ids]
        return str(self._hf.decode(kept, skip_special_tokens=False))

    def id_to_token(self, i: int) -> str:
        token = self._hf.id_to_token(int(i))
        return f"<id {i}>" if token is None else str(token)

    def _state(self) -> dict[str, Any]:
        return {
            "hf": json.loads(self._hf.to_str()),
            "pad_id": self.pad_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "unk_id": self.unk_id,
            "mask_id": self.mask_id,
            "skip_ids": sorted(self.skip_ids),
            "encode_special_tokens": bool(self._hf.encode_special_tokens),
            "chat_template": self.chat_template,
        }

    @classmethod
    def with_special_skipped(
        cls,
        hf_tokenizer: hf_tokenizers.Tokenizer,
        *,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        unk_id: int | None,
        mask_id: int | None = None,
        chat_template: str | None = None,
        encode_special_tokens: bool = False,
    ) -> PretrainedTokenizer:
        """Wrap ``hf_tokenizer`` so ``decode`` drops pad/BOS/EOS and every added token
        the file marks special (what ``skip_special_tokens=True`` does in HF)."""
        marked = [i for i, t in hf_tokenizer.get_added_tokens_decoder().items() if t.special]
        return cls(hf_tokenizer, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, unk_id=unk_id,
                   mask_id=mask_id, skip_ids=sorted({*marked, pad_id, bos_id, eos_id}),
                   chat_template=chat_template,
                   encode_special_tokens=encode_special_tokens)  # fmt: skip

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        try:
            ids = {name: int(state[name]) for name in ("pad_id", "bos_id", "eos_id")}
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"pretrained tokenizer: a special id is missing or bad ({e})") from None
        unk, mask = state.get("unk_id"), state.get("mask_id")
        return cls(
            hf_tokenizer_from_json(state["hf"], "tokenizer JSON"),
            **ids,
            unk_id=None if unk is None else int(unk),
            mask_id=None if mask is None else int(mask),
            skip_ids=[int(i) for i in state.get("skip_ids", [])],
            encode_special_tokens=bool(state.get("encode_special_tokens", False)),
            chat_template=state.get("chat_template"),
        )
