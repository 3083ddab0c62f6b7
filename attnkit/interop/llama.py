"""The Llama family between formats: its shape, attnkit's config for it, and its key table.

Two readers share this module: Hugging Face ``LlamaForCausalLM`` directories
(``attnkit.interop.hf.llama``) and llama.cpp GGUF files
(``attnkit.interop.gguf.read``, whose tensors come out under Hugging Face's names).
Each fills a ``LlamaHParams`` from its own fields (``HParamFields`` names them
for messages); from there on the path is one:

* ``LlamaHParams.check``: what attnkit can build (an even head dim, heads that
  group); ``check_positions``: a RoPE table under
  ``import_writer.MAX_POSITION_VALUES``;
* ``LLAMA_KEYS``: attnkit ``DecoderOnlyLM`` <-> Hugging Face Llama keys, each
  layer's ``q_proj``, ``k_proj``, ``v_proj`` stacked into attnkit's fused
  ``qkv_proj`` (rows ``q | k | v``, ``(D + 2 h_kv d, D)``); sizes from
  ``llama_dims``;
* ``llama_config``: the ``"llama"`` preset's options
  (``attnkit.models.presets``: rotary positions, RMSNorm, SwiGLU, pre-norm, no
  biases, unscaled embeddings, no dropout) with the file's shape and special
  ids (``conventions.pick_special_ids``: BOS and EOS are the file's; pad is
  its padding id when that differs from both, else its unknown-token id, else
  the smallest id neither holds). SmolLM2-135M gives exactly the
  ``smollm2_135m`` preset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from attnkit.errors import CheckpointError
from attnkit.interop.conventions import pick_special_ids
from attnkit.interop.import_writer import check_positions
from attnkit.interop.keytable import Dims, Rule, Table, fuse
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.models.presets import LLAMA_OPTIONS


@dataclass(frozen=True)
class LlamaHParams:
    """A Llama's shape, in attnkit's names (each reader maps its own fields onto them)."""

    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    d_ff: int
    vocab_size: int
    max_len: int
    rope_theta: float
    norm_eps: float
    tie_embeddings: bool  # the output projection is the token embedding

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def check(self, fields: Mapping[str, str], where: str) -> None:
        """Refuse what attnkit cannot build; errors name ``where`` and the file's field."""

        def error(name: str, message: str) -> CheckpointError:
            return CheckpointError(f"{where}: {fields[name]}: {message}")

        if self.d_model % self.num_heads != 0 or self.head_dim % 2 != 0:
            raise error("num_heads", f"{self.num_heads} heads do not split {fields['d_model']} "
                        f"{self.d_model} into an even head dim")  # fmt: skip
        if self.num_heads % self.num_kv_heads != 0:
            raise error("num_kv_heads", f"{self.num_kv_heads} does not divide {self.num_heads}")
        for name in ("rope_theta", "norm_eps"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise error(name, f"must be a finite number > 0, got {value}")

    def check_positions(self, fields: Mapping[str, str], where: str) -> None:
        """Refuse a context whose RoPE table is past the ceiling (once the widths are checked
        against the tensors, so the message blames the right field)."""
        check_positions(self.max_len, self.head_dim, f"{where}: {fields['max_len']}")


_M = "model.layers.{i}"
LLAMA_KEYS = Table(
    "attnkit's DecoderOnlyLM",
    (
        Rule("embed.tokens.weight", "model.embed_tokens.weight", "V D"),
        Rule("final_norm.weight", "model.norm.weight", "D"),
        Rule("lm_head.weight", "lm_head.weight", "V D"),
        Rule("layers.{i}.self_attn_residual.norm.weight", f"{_M}.input_layernorm.weight", "D"),
        fuse("layers.{i}.self_attn.qkv_proj.weight", f"{_M}.self_attn.*_proj.weight", "qkv",
             ("D D", "KV D", "KV D")),
        Rule("layers.{i}.self_attn.out_proj.weight", f"{_M}.self_attn.o_proj.weight", "D D"),
        Rule("layers.{i}.ffn_residual.norm.weight", f"{_M}.post_attention_layernorm.weight",
             "D"),
        Rule("layers.{i}.ffn.gate_proj.weight", f"{_M}.mlp.gate_proj.weight", "F D"),
        Rule("layers.{i}.ffn.up_proj.weight", f"{_M}.mlp.up_proj.weight", "F D"),
        Rule("layers.{i}.ffn.down_proj.weight", f"{_M}.mlp.down_proj.weight", "D F"),
    ),
    ignore=(f"{_M}.self_attn.rotary_emb.inv_freq",),  # a buffer older files saved
)  # fmt: skip
TIED = {"lm_head.weight": "embed.tokens.weight"}


def llama_keys(hp: LlamaHParams) -> Table:
    """``LLAMA_KEYS``, with the output projection tied to the embedding where ``hp`` says so."""
    return LLAMA_KEYS.tie(TIED) if hp.tie_embeddings else LLAMA_KEYS


def llama_dims(
    hp: LlamaHParams, fields: Mapping[str, str] | None = None, source: str = "the config"
) -> Dims:
    """The sizes of the Llama key tables; ``fields``: ``LlamaHParams`` field -> the file's
    name for it (default: the field's own name), ``source``: the file's config, for messages."""
    values = {"D": hp.d_model, "F": hp.d_ff, "V": hp.vocab_size, "H": hp.num_heads,
              "HKV": hp.num_kv_heads, "KV": hp.num_kv_heads * hp.head_dim,
              "i": hp.num_layers}  # fmt: skip
    names = {"D": "d_model", "F": "d_ff", "V": "vocab_size", "H": "num_heads",
             "HKV": "num_kv_heads", "KV": "num_kv_heads", "i": "num_layers"}  # fmt: skip
    named = {k: (fields or {}).get(v, v) for k, v in names.items()}
    return Dims(values, named, source)


def llama_ids(
    hp: LlamaHParams, file_ids: Mapping[str, object], where: str
) -> tuple[dict[str, int], list[str]]:
    """Distinct pad/BOS/EOS ids from the file's ``bos_id``, ``eos_id``, ``pad_id``, ``unk_id``
    (each an id, a list of ids, best first, or None)."""

    def listed(*roles: str) -> list[object]:
        values = [file_ids.get(role) for role in roles]
        return [i for v in values for i in (v if isinstance(v, list) else [v])]

    candidates = {"eos_id": listed("eos_id"), "bos_id": listed("bos_id"),
                  "pad_id": listed("pad_id", "unk_id")}  # fmt: skip
    return pick_special_ids(candidates, hp.vocab_size, why="the file has no distinct one",
                            where=where)  # fmt: skip


def llama_config(hp: LlamaHParams, file_ids: Mapping[str, object]) -> DecoderOnlyConfig:
    """The ``"llama"`` preset with ``hp``'s shape and the special ids ``llama_ids`` picks."""
    ids, _ = llama_ids(hp, file_ids, "the file")
    return DecoderOnlyConfig.from_dict(
        {
            **LLAMA_OPTIONS,
            "d_model": hp.d_model,
            "num_heads": hp.num_heads,
            "num_kv_heads": hp.num_kv_heads,
            "d_ff": hp.d_ff,
            "num_layers": hp.num_layers,
            "vocab_size": hp.vocab_size,
            "max_len": hp.max_len,
            "rope_theta": hp.rope_theta,
            "norm_eps": hp.norm_eps,
            "tie_embeddings": hp.tie_embeddings,
            **ids,
        }
    )
