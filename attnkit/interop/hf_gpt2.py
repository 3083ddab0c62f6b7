"""GPT-2 checkpoints (``GPT2LMHeadModel``, ``GPT2Model``) -> attnkit ``DecoderOnlyLM``.

* ``wte`` -> ``embed.tokens`` (no ``sqrt(d)`` scaling), ``wpe`` -> learned
  positions, ``max_len`` = ``n_positions``;
* pre-LN layers: ``ln_1``/``ln_2`` -> the residuals' norms, ``ln_f`` ->
  ``final_norm``, eps ``layer_norm_epsilon``;
* GPT-2's ``Conv1D`` stores weights as ``(in, out)``: every one is
  transposed. ``c_attn`` ``(D, 3D)`` transposed is ``(3D, D)`` with rows
  q, k, v: attnkit's fused ``qkv_proj`` layout as it is;
* ``activation_function`` ``gelu_new`` (GPT-2's tanh approximation) ->
  ``gelu_tanh``; ``lm_head`` tied to ``wte`` (``tie_word_embeddings``);
* ``scale_attn_weights=False`` -> ``attention_score="dot"``;
  ``scale_attn_by_inverse_layer_idx`` is refused (attnkit has no per-layer
  scale).

**Special ids.** GPT-2 has one special token, ``<|endoftext|>``, used as
BOS and EOS, and no pad token; attnkit's config needs three distinct ids.
``eos_id`` is ``eos_token_id``; ``bos_id`` and ``pad_id`` are the config's own
when distinct, else the smallest ordinary ids not yet taken. Neither is ever
fed to the model by ``attnkit generate`` (a prompt's last token starts
generation; pad only fills finished rows), and the tokenizer's ``decode``
drops only ``<|endoftext|>``, so text is unaffected; they are recorded in
the run's ``import.json``.
"""

from __future__ import annotations

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import CheckpointError
from attnkit.interop.hf_files import (
    CONFIG,
    HFDirectory,
    WeightMap,
    read_tokenizer,
    read_weights,
    special_ids,
)
from attnkit.interop.hf_import_types import Imported
from attnkit.models.lm_config import DecoderOnlyConfig

GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                    "gelu_fast": "gelu_tanh", "gelu": "gelu", "relu": "relu"}  # fmt: skip


def _ids(d: HFDirectory, vocab: int) -> tuple[dict[str, int], list[str]]:
    eos = int(d.get("eos_token_id", vocab - 1))
    taken = {eos}
    ids, notes = {"eos_id": eos}, []
    for name, key in (("bos_id", "bos_token_id"), ("pad_id", "pad_token_id")):
        own = d.get(key)
        if isinstance(own, int) and own not in taken:
            ids[name] = own
        else:
            ids[name] = next(i for i in range(vocab) if i not in taken)
            notes.append(f"{name}={ids[name]} nominated: GPT-2 has no distinct {key[:-9]} "
                         "token; attnkit never feeds it (see attnkit.interop.hf_gpt2)")  # fmt: skip
        taken.add(ids[name])
    return ids, notes


def _layer(w: WeightMap, i: int) -> None:
    src, ours = f"h.{i}.", f"layers.{i}."
    for name, key in (("attn.c_attn", "self_attn.qkv_proj"), ("attn.c_proj", "self_attn.out_proj"),
                      ("mlp.c_fc", "ffn.w1"), ("mlp.c_proj", "ffn.w2")):  # fmt: skip
        w.put(f"{ours}{key}.weight", f"{src}{name}.weight", w.get(f"{src}{name}.weight").t())
        w.put(f"{ours}{key}.bias", f"{src}{name}.bias")
    for kind in ("weight", "bias"):
        w.put(f"{ours}self_attn_residual.norm.{kind}", f"{src}ln_1.{kind}")
        w.put(f"{ours}ffn_residual.norm.{kind}", f"{src}ln_2.{kind}")


def import_gpt2(d: HFDirectory) -> Imported:
    """The attnkit config, state dict, tokenizer and notes of a GPT-2 directory."""
    act = d.get("activation_function", "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        raise CheckpointError(f"{d.file(CONFIG)}: activation_function: {act!r} is not "
                              f"supported (supported: {', '.join(GPT2_ACTIVATIONS)})")  # fmt: skip
    if d.get("scale_attn_by_inverse_layer_idx", False):
        raise CheckpointError(f"{d.file(CONFIG)}: scale_attn_by_inverse_layer_idx: true is not "
                              "supported (attnkit scales every layer alike)")  # fmt: skip
    vocab = int(d.require("vocab_size"))
    hf_tokenizer = read_tokenizer(d)
    ids, notes = _ids(d, vocab)
    pad, bos, eos = ids["pad_id"], ids["bos_id"], ids["eos_id"]
    tokenizer = PretrainedTokenizer(
        hf_tokenizer, pad_id=pad, bos_id=bos, eos_id=eos, unk_id=eos,
        skip_ids=special_ids(hf_tokenizer),
    )  # fmt: skip
    w = WeightMap(read_weights(d), d, prefix="transformer.")
    D = int(d.require("n_embd"))
    layers = int(d.require("n_layer"))
    tied = bool(d.get("tie_word_embeddings", True))
    w.put("embed.tokens.weight", "wte.weight")
    w.put("embed.positions.weight", "wpe.weight")
    for i in range(layers):
        _layer(w, i)
    for kind in ("weight", "bias"):
        w.put(f"final_norm.{kind}", f"ln_f.{kind}")
    if tied:
        w.state["lm_head.weight"] = w.state["embed.tokens.weight"]
    else:
        w.put("lm_head.weight", "lm_head.weight")
    config = DecoderOnlyConfig(
        d_model=D,
        num_heads=int(d.require("n_head")),
        d_ff=int(d.get("n_inner", 4 * D)),
        num_layers=layers,
        vocab_size=vocab,
        max_len=int(d.require("n_positions")),
        activation=GPT2_ACTIVATIONS[act],  # type: ignore[arg-type]
        norm_position="pre",
        norm_eps=float(d.get("layer_norm_epsilon", 1e-5)),
        positions="learned",
        scale_embeddings=False,
        attention_score="scaled_dot" if d.get("scale_attn_weights", True) else "dot",
        dropout=float(d.get("resid_pdrop", 0.1)),
        attention_dropout=float(d.get("attn_pdrop", 0.1)),
        tie_embeddings=tied,
        pad_id=pad,
        bos_id=bos,
        eos_id=eos,
    )
    return Imported(config, w.state, w.origin, tokenizer, notes)
