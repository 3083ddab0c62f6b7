"""``T5ForConditionalGeneration`` directories -> attnkit ``EncoderDecoder`` with T5's options.

The tensors go through ``hf.t5.t5_keys`` (copied by indexing only); every
shape and layer count is checked against ``config.json`` first.

Mapped from ``config.json``: sizes, ``num_decoder_layers`` (default
``num_layers``), ``relative_attention_num_buckets``/``_max_distance``,
``layer_norm_epsilon``, ``dropout_rate`` (also on the attention weights, as
T5 does), ``feed_forward_proj`` (``relu``, ``gelu``, ``gated-gelu`` -> attnkit's
``gated_gelu``, ``gated-silu`` -> ``swiglu``), the ids (pad, EOS, and
``decoder_start_token_id``, T5's ``<pad>``, as attnkit's BOS: the config
allows BOS = pad for this), ``n_positions`` as ``max_len`` (T5 itself has no
limit: it bounds attnkit's decoding caches, default 512). The output:
``share_embeddings="inputs"`` when the file holds its own ``lm_head.weight``
(T5 v1.1), else ``"all"``; the ``d_model**-0.5`` rescale of the decoder
output is ``scale_decoder_outputs`` where the file says it (transformers 5)
and ``tie_word_embeddings`` otherwise (false in T5 v1.1's files).

Refused with a one-line error naming the field: ``d_kv * num_heads`` other
than ``d_model`` (attnkit's heads split the model width; T5 v1.1's small and
base models use a narrower attention), an FFN attnkit lacks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import CheckpointError
from attnkit.interop.hf.files import (
    CONFIG,
    WEIGHTS,
    HFDirectory,
    map_weights,
    read_tokenizer,
    read_weights,
    special_ids,
    special_token,
    token_id,
)
from attnkit.interop.hf.t5 import t5_dims, t5_keys, t5_ties
from attnkit.interop.import_writer import Imported
from attnkit.models.config import TransformerConfig
from attnkit.models.presets import T5_OPTIONS

# feed_forward_proj -> attnkit's activation (HF "gated-gelu" is the tanh GELU, gelu_new).
T5_FFN = {"relu": "relu", "gelu": "gelu", "gated-gelu": "gated_gelu", "gated-silu": "swiglu"}


def t5_config(d: HFDirectory, *, own_output: bool) -> TransformerConfig:
    """The attnkit config of a T5 ``config.json``; ``own_output``: the file has ``lm_head``."""
    D, heads = d.integer("d_model"), d.integer("num_heads")
    if d.integer("d_kv", D // heads) * heads != D:
        raise d.error("d_kv", f"{d.config['d_kv']} x num_heads={heads} is not d_model={D}; "
                      "attnkit's attention heads split the model width")  # fmt: skip
    ffn = d.get("feed_forward_proj", "relu")
    if ffn not in T5_FFN:
        raise d.error("feed_forward_proj", f"{ffn!r} is not supported "
                      f"(supported: {', '.join(T5_FFN)})")  # fmt: skip
    scale = d.config.get("scale_decoder_outputs")
    if not isinstance(scale, bool):
        scale = d.config.get("tie_word_embeddings", True) is not False
    layers = d.integer("num_layers")
    pad, eos = d.integer("pad_token_id", 0, least=0), d.integer("eos_token_id", 1, least=0)
    dropout = d.number("dropout_rate", 0.1)
    vocab = d.integer("vocab_size")
    fields = {
        **T5_OPTIONS,
        "d_model": D,
        "num_heads": heads,
        "d_ff": d.integer("d_ff"),
        "num_encoder_layers": layers,
        "num_decoder_layers": d.integer("num_decoder_layers", layers),
        "relative_buckets": d.integer("relative_attention_num_buckets", 32),
        "relative_max_distance": d.integer("relative_attention_max_distance", 128),
        "norm_eps": d.number("layer_norm_epsilon", 1e-6),
        "dropout": dropout,
        "attention_dropout": dropout,
        "activation": T5_FFN[ffn],
        "max_len": d.integer("n_positions", 512),
        "src_vocab_size": vocab,
        "tgt_vocab_size": vocab,
        "share_embeddings": "inputs" if own_output else "all",
        "scale_output": scale,
        "pad_id": pad,
        "bos_id": d.integer("decoder_start_token_id", pad, least=0),
        "eos_id": eos,
    }
    return d.build(TransformerConfig, **fields)


def t5_tokenizer(d: HFDirectory, c: TransformerConfig) -> PretrainedTokenizer:
    """The directory's tokenizer with the config's ids (unk from the tokenizer files)."""
    hf = read_tokenizer(d)
    model_unk = json.loads(hf.to_str()).get("model", {}).get("unk_token")
    default: str = model_unk if isinstance(model_unk, str) else "<unk>"
    unk = token_id(hf, special_token(d, "unk_token", default), d, "unknown")
    return PretrainedTokenizer(hf, pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id,
                               unk_id=unk, skip_ids=special_ids(hf))  # fmt: skip


def check_layer_counts(d: HFDirectory, keys: Iterable[str], config: TransformerConfig) -> None:
    """Each stack's layer count is the number of blocks the file holds: checked before
    ``t5_ties`` makes a key per layer (``num_layers: 10**9`` would fill memory first)."""
    counts = (("encoder", "num_layers", config.num_encoder_layers),
              ("decoder", "num_decoder_layers", config.num_decoder_layers))  # fmt: skip
    for stack, name, want in counts:
        block = re.compile(rf"{stack}\.block\.(\d+)\.")
        held = {int(m.group(1)) for key in keys if (m := block.match(key))}
        if len(held) != want or (held and max(held) != want - 1):  # never range(want)
            holds = f"{len(held)} (indices {min(held)}..{max(held)})" if held else "none"
            raise CheckpointError(
                f"{d.file(WEIGHTS)}: {name} is {want} in {CONFIG}, but the file holds the "
                f"tensors of {holds}; the file and {CONFIG} disagree"
            )


def import_t5(d: HFDirectory) -> Imported:
    """The attnkit config, state dict, tokenizer and notes of a T5 directory."""
    weights = read_weights(d)
    config = t5_config(d, own_output="lm_head.weight" in weights)
    check_layer_counts(d, weights, config)
    tokenizer = t5_tokenizer(d, config)
    gated = config.activation in ("gated_gelu", "swiglu")
    table = t5_keys(gated=gated).tie(t5_ties(config))
    state = map_weights(d, weights, table, t5_dims(config, CONFIG))
    notes = []
    if config.bos_id == config.pad_id:
        notes.append(f"the decoder starts from <pad> (id {config.pad_id}), T5's convention: "
                     "attnkit's BOS is that id")  # fmt: skip
    details = {"architectures": d.config.get("architectures"),
               "feed_forward_proj": d.get("feed_forward_proj", "relu")}  # fmt: skip
    return Imported(config, state, tokenizer, "hf", "t5", notes, details)
