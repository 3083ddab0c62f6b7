"""A ``tokenizers.Tokenizer`` rebuilt from a GGUF file's ``tokenizer.*`` metadata.

A GGUF carries no ``tokenizer.json``: it stores the vocabulary
(``tokenizer.ggml.tokens``), the BPE merges (``tokenizer.ggml.merges``,
``"a b"`` strings, best first), each token's type (``tokenizer.ggml.token_type``:
1 normal, 3 control, 4 user-defined, ...), the special ids and a *name* for
the pre-tokenizer (``tokenizer.ggml.pre``) whose regexes live in llama.cpp's
``llama-vocab.cpp``. Only byte-level BPE (``tokenizer.ggml.model == "gpt2"``,
GPT-2 / Llama 3 / SmolLM style) is handled here.

**Pre-tokenizers** (``PRE_TOKENIZERS``), by ``tokenizer.ggml.pre``:

* ``"gpt2"`` (``"gpt-2"`` in llama.cpp's files): GPT-2's regex
  ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``
  (``ByteLevel(use_regex=True)``);
* ``"smollm"``: every number character on its own first, then GPT-2's regex
  on the stretches between them. SmolLM's ``tokenizer.json`` does this
  (``Digits(individual_digits=True)`` before ``ByteLevel``), and so does
  llama.cpp (``LLAMA_VOCAB_PRE_TYPE_SMOLLM``: ``\\p{N}`` then GPT-2's regex;
  its PR #8609 checked it against the HF tokenizer). ``Digits`` is used here
  as in SmolLM's own file (Rust's ``is_numeric``; llama.cpp's ``\\p{N}``
  differs from it on a dozen rare code points).

Hugging Face's GGUF loader (transformers 5.23) has no entry for ``"smollm"``
and falls back to plain ``"gpt2"``. That changes the ids where a number
follows whitespace, which GPT-2's regex glues to it (`` ?\\p{N}+``):

* a whitespace run before a number: ``"a  1"`` is ``a``, ``"  "``, ``1`` for
  SmolLM (the run ends its stretch, one token ``ĠĠ``) but ``a``, ``" "``,
  ``" 1"`` for GPT-2's regex (``Ġ``, ``Ġ``, ``1``: the vocabulary has no
  space+digit merges);
* a non-ASCII number after a space: ``" ½"`` (bytes 20 C2 BD) is ``Ġ``,
  ``Â½`` for SmolLM, but one piece for GPT-2's regex, which BPE merges
  into ``ĠÂ``, ``½`` (space + first byte, then the second byte).

ASCII digits after a single space give the same ids either way.
``pre_tokenizer="gpt2"`` reproduces Hugging Face's GGUF tokenizer exactly.

Shapes: none; ids are Python ints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

from attnkit.errors import CheckpointError

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED = 1, 3, 4


def _gpt2() -> list[pre_tokenizers.PreTokenizer]:
    return [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]


def _smollm() -> list[pre_tokenizers.PreTokenizer]:
    return [pre_tokenizers.Digits(individual_digits=True), *_gpt2()]


# tokenizer.ggml.pre -> the pieces llama.cpp splits into before BPE. Other names of
# llama-vocab.cpp (llama-bpe, qwen2, ...) need their regexes and a parity test first.
PRE_TOKENIZERS = {"gpt2": _gpt2, "smollm": _smollm}
# ``tokenizer.ggml.pre`` as llama.cpp spells it (llama-vocab.cpp) -> the name above.
# llama.cpp refuses a file whose value it does not know ("gpt2" included: attnkit's
# export wrote that before llama.cpp itself ran its files in a test), so the export
# writes llama.cpp's names; the import reads both spellings.
FILE_NAMES = {"gpt-2": "gpt2", "gpt2": "gpt2", "smollm": "smollm"}
LLAMA_CPP_NAMES = {"gpt2": "gpt-2", "smollm": "smollm"}


def build_tokenizer(
    path: Path, values: dict[str, Any], *, pre_tokenizer: str | None = None
) -> Tokenizer:
    """The byte-level BPE tokenizer the metadata ``values`` describe; errors name the key.

    Args:
        path: the file, for messages.
        values: every metadata key -> Python value (strings, ints, lists).
        pre_tokenizer: a ``PRE_TOKENIZERS`` name overriding ``tokenizer.ggml.pre``.
    """

    def error(key: str, message: str) -> CheckpointError:
        return CheckpointError(f"{path}: {key}: {message}")

    model = values.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise error("tokenizer.ggml.model", f"{model!r} is not supported (supported: gpt2)")
    pre = pre_tokenizer or values.get("tokenizer.ggml.pre")
    pre = FILE_NAMES.get(pre, pre) if isinstance(pre, str) else pre
    if pre not in PRE_TOKENIZERS:
        raise error(
            "tokenizer.ggml.pre",
            f"{pre!r} is not supported (supported: {', '.join(PRE_TOKENIZERS)}; "
            "pass pre_tokenizer= to choose one)",
        )
    tokens = values.get("tokenizer.ggml.tokens")
    merges = values.get("tokenizer.ggml.merges")
    if not isinstance(tokens, list) or not tokens:
        raise error("tokenizer.ggml.tokens", "missing or empty")
    if not isinstance(merges, list):
        raise error("tokenizer.ggml.merges", "missing (byte-level BPE needs its merges)")
    types = values.get("tokenizer.ggml.token_type", [TOKEN_NORMAL] * len(tokens))
    if len(types) != len(tokens):
        raise error("tokenizer.ggml.token_type", f"{len(types)} types for {len(tokens)} tokens")

    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise error("tokenizer.ggml.tokens", "holds the same token twice")
    pairs = []
    for i, merge in enumerate(merges):
        parts = merge.split(" ")
        if len(parts) != 2 or parts[0] + parts[1] not in vocab:
            raise error(f"tokenizer.ggml.merges[{i}]", f"{merge!r} is not 'a b' of a token ab")
        pairs.append((parts[0], parts[1]))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))

    pieces = PRE_TOKENIZERS[pre]()
    if values.get("tokenizer.ggml.add_space_prefix", False):
        pieces[-1] = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.pre_tokenizer = pre_tokenizers.Sequence(pieces)
    tok.decoder = decoders.ByteLevel()

    # Control tokens (<|im_start|>, ...) and user-defined ones are matched whole
    # before pre-tokenization, as llama.cpp does; control ones are skipped when
    # decoding with skip_special_tokens.
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False)
         for t, kind in zip(tokens, types) if kind == TOKEN_CONTROL]
    )  # fmt: skip
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False)
         for t, kind in zip(tokens, types) if kind == TOKEN_USER_DEFINED]
    )  # fmt: skip
    if tok.get_vocab_size(with_added_tokens=True) != len(tokens):
        raise error("tokenizer.ggml.tokens", "added tokens grew the vocabulary")

    _set_post_processor(tok, values, tokens, error)
    return tok


def _set_post_processor(tok: Tokenizer, values: dict[str, Any], tokens: list[str], error) -> None:
    """BOS/EOS added by ``encode`` when the file's ``add_bos_token``/``add_eos_token`` say so."""
    single, specials = "$A", []
    for flag, id_key, template in (("add_bos_token", "bos_token_id", "{} $A"),
                                   ("add_eos_token", "eos_token_id", "$A {}")):  # fmt: skip
        if not values.get(f"tokenizer.ggml.{flag}", False):
            continue
        token_id = values.get(f"tokenizer.ggml.{id_key}")
        if not isinstance(token_id, int) or not 0 <= token_id < len(tokens):
            raise error(f"tokenizer.ggml.{id_key}", f"{flag} is set but the id is {token_id!r}")
        single = template.format(tokens[token_id]).replace("$A", single)
        specials.append((tokens[token_id], token_id))
    if specials:
        tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=specials)
