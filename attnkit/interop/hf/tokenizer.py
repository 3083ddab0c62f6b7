"""attnkit tokenizers as ``tokenizer.json`` files that ``transformers`` loads by itself.

An export holds a ``tokenizer.json`` (the HF ``tokenizers`` format) and a
``tokenizer_config.json`` naming ``PreTrainedTokenizerFast``, so
``AutoTokenizer.from_pretrained(DIR)`` needs neither attnkit nor
SentencePiece. The file is made to tokenize as ``attnkit translate`` does:

* BPE: attnkit's own HF tokenizer JSON; char: a ``WordLevel`` model over
  single characters (``Split`` on ``.``, decoded by ``Fuse``); word:
  ``WordLevel`` over whitespace-separated words (decoded with spaces); an
  imported model's ``PretrainedTokenizer``: its file as it is;
* a post-processor appends ``</s>``: attnkit sources end with EOS, and
  ``tokenizer(text)`` then gives exactly the ids ``attnkit translate`` feeds;
* ``<pad>``, ``<s>`` and ``</s>`` stay special (``skip_special_tokens``
  drops them), ``<unk>`` does not: attnkit's ``decode`` shows unknown
  pieces as ``<unk>``, and so does ``batch_decode(..., skip_special_tokens=True)``;
* ``split_special_tokens``: text such as ``"<s>"`` is encoded as characters,
  never as the special token (attnkit's BPE does the same);
* ``clean_up_tokenization_spaces`` off: attnkit's decode does no clean-up.

``remap_ids`` renumbers every id in such a file (the CTranslate2 export puts
``<pad>`` last). An encoder's export (``encoder_tokenizer_json``: BERT's task
heads) frames a text as attnkit's encoders read it instead, ``<s> text </s>``
(an imported BERT's own file, ``[CLS] text [SEP]``, is kept as it is).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from attnkit import jsonio
from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer, WordTokenizer
from attnkit.errors import ConfigError


def _specials(tokenizer: Tokenizer) -> dict[str, tuple[str, int]]:
    """Role -> (token string, id) of pad, bos, eos and unk."""
    ids = {"pad": tokenizer.pad_id, "bos": tokenizer.bos_id, "eos": tokenizer.eos_id,
           "unk": tokenizer.unk_id}  # fmt: skip
    return {role: (tokenizer.id_to_token(i), i) for role, i in ids.items() if i is not None}


def _piece_tokenizer(tokenizer: CharTokenizer | WordTokenizer) -> dict[str, object]:
    """A ``WordLevel`` tokenizer over the pieces of attnkit's char or word tokenizer."""
    import tokenizers as tk

    vocab = {piece: i for i, piece in enumerate(tokenizer.pieces)}
    assert tokenizer.unk_id is not None  # attnkit's own tokenizers always have one
    hf = tk.Tokenizer(tk.models.WordLevel(vocab, unk_token=tokenizer.id_to_token(tokenizer.unk_id)))
    if isinstance(tokenizer, CharTokenizer):
        hf.pre_tokenizer = tk.pre_tokenizers.Split(tk.Regex("."), behavior="isolated")
        hf.decoder = tk.decoders.Fuse()  # pieces joined with nothing between them
    else:
        hf.pre_tokenizer = tk.pre_tokenizers.WhitespaceSplit()  # decoded with single spaces
    data: dict[str, object] = json.loads(hf.to_str())
    return data


def base_tokenizer_json(tokenizer: Tokenizer) -> dict[str, Any]:
    """The HF ``tokenizers`` JSON (as a dict) that encodes like ``tokenizer``."""
    if isinstance(tokenizer, BPETokenizer | PretrainedTokenizer):
        data: dict[str, object] = tokenizer._state()["hf"]  # the HF JSON, parsed afresh
        return data
    if isinstance(tokenizer, CharTokenizer | WordTokenizer):
        return _piece_tokenizer(tokenizer)
    raise ConfigError(f"tokenizer: cannot export a {type(tokenizer).__name__} tokenizer")


def hf_tokenizer_json(tokenizer: Tokenizer) -> dict[str, object]:
    """``tokenizer.json`` for a translation export (see the module doc), attnkit's ids."""
    data = base_tokenizer_json(tokenizer)
    specials = _specials(tokenizer)
    special_roles = ("pad", "bos", "eos")
    added = {entry["id"]: entry for entry in data.get("added_tokens") or []}
    for role, (token, i) in specials.items():
        new = {"id": i, "content": token, "single_word": False, "lstrip": False,
               "rstrip": False, "normalized": False}  # fmt: skip
        entry = added.setdefault(i, new)
        entry["special"] = role in special_roles
    data["added_tokens"] = [added[i] for i in sorted(added)]
    eos_token, eos_id = specials["eos"]
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": eos_token, "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}},
                 {"SpecialToken": {"id": eos_token, "type_id": 1}}],
        "special_tokens": {eos_token: {"id": eos_token, "ids": [eos_id], "tokens": [eos_token]}},
    }  # fmt: skip
    data["padding"] = None
    data["truncation"] = None
    return data


def encoder_tokenizer_json(tokenizer: Tokenizer) -> dict[str, object]:
    """``tokenizer.json`` for an encoder's export: BOS, the text, EOS (a pair: BOS, the
    first, EOS, the second, EOS, with token types 0 then 1), as attnkit's encoders read
    it; a ``PretrainedTokenizer``'s own file (BERT's post-processor does the same)."""
    if isinstance(tokenizer, PretrainedTokenizer):
        return base_tokenizer_json(tokenizer)
    data = hf_tokenizer_json(tokenizer)
    (bos, bos_id), (eos, eos_id) = _specials(tokenizer)["bos"], _specials(tokenizer)["eos"]

    def special(token: str, type_id: int) -> dict[str, object]:
        return {"SpecialToken": {"id": token, "type_id": type_id}}

    def text(name: str, type_id: int) -> dict[str, object]:
        return {"Sequence": {"id": name, "type_id": type_id}}

    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [special(bos, 0), text("A", 0), special(eos, 0)],
        "pair": [special(bos, 0), text("A", 0), special(eos, 0), text("B", 1), special(eos, 1)],
        "special_tokens": {token: {"id": token, "ids": [i], "tokens": [token]}
                           for token, i in ((bos, bos_id), (eos, eos_id))},
    }  # fmt: skip
    return data


def hf_tokenizer_config(tokenizer: Tokenizer, max_len: int) -> dict[str, object]:
    """``tokenizer_config.json``: the class, the special tokens, attnkit's encoding rules.

    ``unk_token`` is left out on purpose: transformers would mark it special
    and ``skip_special_tokens`` would then drop it, which attnkit never does.
    """
    specials = _specials(tokenizer)
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": specials["pad"][0],
        "bos_token": specials["bos"][0],
        "eos_token": specials["eos"][0],
        "model_max_length": max_len,
        "padding_side": "right",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": True,
    }


def encoder_tokenizer_config(tokenizer: Tokenizer, max_len: int) -> dict[str, object]:
    """``tokenizer_config.json`` of an encoder's export: BERT's roles (``cls_token`` =
    BOS, ``sep_token`` = EOS, pad, unknown, and the mask token where the vocabulary has
    one), which ``attnkit import --from hf`` reads back."""
    roles = {"cls_token": tokenizer.bos_id, "sep_token": tokenizer.eos_id,
             "pad_token": tokenizer.pad_id, "unk_token": tokenizer.unk_id,
             "mask_token": tokenizer.mask_id}  # fmt: skip
    named = {role: tokenizer.id_to_token(i) for role, i in roles.items()
             if i is not None and i < tokenizer.vocab_size}  # fmt: skip
    return {"tokenizer_class": "PreTrainedTokenizerFast", **named, "model_max_length": max_len,
            "padding_side": "right", "clean_up_tokenization_spaces": False}  # fmt: skip


def remap_ids(data: dict[str, Any], new_id: Callable[[int], int]) -> dict[str, Any]:
    """A copy of tokenizer JSON ``data`` with every token id ``i`` renumbered ``new_id(i)``.

    Handles the vocabularies of BPE/WordLevel/WordPiece models, the added
    tokens and a ``TemplateProcessing`` post-processor.
    """
    data = json.loads(jsonio.dumps(data))
    model = data.get("model") or {}
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise ConfigError(f"tokenizer: cannot renumber a {model.get('type')!r} vocabulary")
    model["vocab"] = {token: new_id(i) for token, i in vocab.items()}
    for entry in data.get("added_tokens") or []:
        entry["id"] = new_id(entry["id"])
    data["added_tokens"] = sorted(data.get("added_tokens") or [], key=lambda e: e["id"])
    post = data.get("post_processor") or {}
    for special in (post.get("special_tokens") or {}).values():
        special["ids"] = [new_id(i) for i in special["ids"]]
    return data
