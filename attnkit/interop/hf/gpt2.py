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

The keys: ``GPT2_KEYS`` (``attnkit.interop.keymap``; a file's
``transformer.`` prefix is optional).

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
from attnkit.interop.conventions import activation_from_hf, pick_special_ids
from attnkit.interop.hf.files import (
    CONFIG,
    HFDirectory,
    map_weights,
    read_tokenizer,
    read_weights,
    special_ids,
)
from attnkit.interop.import_writer import Imported
from attnkit.interop.keytable import TRANSPOSE, Rule, Table
from attnkit.models.lm_config import DecoderOnlyConfig

_H = "h.{i}"
_T = (TRANSPOSE,)  # Conv1D weights are (in, out)
GPT2_KEYS = Table(
    "attnkit's DecoderOnlyLM",
    (
        Rule("embed.tokens.weight", "wte.weight", "V D"),
        Rule("embed.positions.weight", "wpe.weight", "P D"),
        Rule("layers.{i}.self_attn.qkv_proj.weight", f"{_H}.attn.c_attn.weight", "D 3*D", _T),
        Rule("layers.{i}.self_attn.qkv_proj.bias", f"{_H}.attn.c_attn.bias", "3*D"),
        Rule("layers.{i}.self_attn.out_proj.weight", f"{_H}.attn.c_proj.weight", "D D", _T),
        Rule("layers.{i}.self_attn.out_proj.bias", f"{_H}.attn.c_proj.bias", "D"),
        Rule("layers.{i}.ffn.w1.weight", f"{_H}.mlp.c_fc.weight", "D F", _T),
        Rule("layers.{i}.ffn.w1.bias", f"{_H}.mlp.c_fc.bias", "F"),
        Rule("layers.{i}.ffn.w2.weight", f"{_H}.mlp.c_proj.weight", "F D", _T),
        Rule("layers.{i}.ffn.w2.bias", f"{_H}.mlp.c_proj.bias", "D"),
        Rule("layers.{i}.self_attn_residual.norm.{wb}", f"{_H}.ln_1.{{wb}}", "D"),
        Rule("layers.{i}.ffn_residual.norm.{wb}", f"{_H}.ln_2.{{wb}}", "D"),
        Rule("final_norm.{wb}", "ln_f.{wb}", "D"),
        Rule("lm_head.weight", "lm_head.weight", "V D"),
    ),
    ignore=(f"{_H}.attn.bias", f"{_H}.attn.masked_bias"),  # causal-mask buffers of old files
    prefix="transformer.",
)
GPT2_FIELDS = {"D": "n_embd", "F": "n_inner", "V": "vocab_size", "P": "n_positions",
               "i": "n_layer"}  # fmt: skip


def import_gpt2(d: HFDirectory) -> Imported:
    """The attnkit config, state dict, tokenizer and notes of a GPT-2 directory."""
    act = activation_from_hf(d.get("activation_function", "gelu_new"),
                             f"{d.file(CONFIG)}: activation_function")  # fmt: skip
    if d.get("scale_attn_by_inverse_layer_idx", False):
        raise d.error("scale_attn_by_inverse_layer_idx",
                      "true is not supported (attnkit scales every layer alike)")  # fmt: skip
    vocab = int(d.integer("vocab_size"))
    hf_tokenizer = read_tokenizer(d)
    candidates = {"eos_id": [d.get("eos_token_id"), vocab - 1], "bos_id": [d.get("bos_token_id")],
                  "pad_id": [d.get("pad_token_id")]}  # fmt: skip
    ids, notes = pick_special_ids(candidates, vocab, why="GPT-2 has no distinct token for it",
                                  where=str(d.file(CONFIG)))  # fmt: skip
    pad, bos, eos = ids["pad_id"], ids["bos_id"], ids["eos_id"]
    tokenizer = PretrainedTokenizer(hf_tokenizer, pad_id=pad, bos_id=bos, eos_id=eos, unk_id=eos,
                                    skip_ids=special_ids(hf_tokenizer))  # fmt: skip
    D = d.integer("n_embd")
    values = {"D": D, "F": d.integer("n_inner", 4 * D), "V": vocab,
              "P": d.integer("n_positions"), "i": d.integer("n_layer")}  # fmt: skip
    tied = bool(d.get("tie_word_embeddings", True))
    table = GPT2_KEYS.tie({"lm_head.weight": "embed.tokens.weight"}) if tied else GPT2_KEYS
    state = map_weights(d, read_weights(d), table, d.dims(values, GPT2_FIELDS))
    config = d.build(
        DecoderOnlyConfig,
        d_model=D,
        num_heads=d.integer("n_head"),
        d_ff=values["F"],
        num_layers=values["i"],
        vocab_size=vocab,
        max_len=values["P"],
        activation=act,
        norm_position="pre",
        norm_eps=d.number("layer_norm_epsilon", 1e-5),
        positions="learned",
        scale_embeddings=False,
        attention_score="scaled_dot" if d.get("scale_attn_weights", True) else "dot",
        dropout=d.number("resid_pdrop", 0.1),
        attention_dropout=d.number("attn_pdrop", 0.1),
        tie_embeddings=tied,
        pad_id=pad,
        bos_id=bos,
        eos_id=eos,
    )
    details = {"architectures": d.config.get("architectures"), "special_ids": ids}
    return Imported(config, state, tokenizer, "hf", "gpt2", notes, details)
