"""An encoder-decoder warm-started from a BERT-type encoder (Rothe et al., 2020, "BERT2BERT").

``attnkit train --init ENCODER`` of an ``encoder_only`` checkpoint (an imported
BERT or MiniLM) into a task that trains an encoder-decoder (``summarization``,
``translation``) starts from ``seq2seq_initial(initial)``: the ``--init``
checkpoint turned into a ``transformer``-family one, which the task then
loads like any other.

* The architecture is the encoder's (``TransformerConfig`` takes BERT's
  options as they are: post-LN layers, learned positions, the embedding
  LayerNorm, GELU, ``norm_eps``, unscaled embeddings), with as many decoder
  layers as encoder layers and one shared vocabulary; the output projection
  is tied to the (shared) token embedding (``share_embeddings: all``), as in
  the paper's BERT2BERT with shared weights for the embeddings.
* Weights: the token embedding is BERT's; both the encoder's and the
  decoder's input embedding get BERT's position table plus its token-type 0
  row (BERT adds that row to every token of a single sentence: folding it in
  keeps the sum exact) and its embedding LayerNorm. Encoder layer ``i`` is
  BERT's layer ``i``; decoder layer ``i`` gets the same self-attention, FFN
  and their norms, its self-attention made causal by the decoder (the
  weights do not change; the mask does).
* The cross-attention sublayers (and their norms) are new: initialised as
  ``attnkit.models.builders.init_weights`` does for a fresh model, from a
  generator seeded with ``seed`` (so a run is reproducible).
* BERT's pooler and MLM head are left out.

Shapes: ``V`` vocabulary, ``D`` d_model, ``P`` positions.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from attnkit.errors import CheckpointError
from attnkit.models.config import TransformerConfig
from attnkit.models.config_base import AttentionStackConfig
from attnkit.models.lm_config import EncoderOnlyConfig
from attnkit.models.registry import build_model
from attnkit.training.warm_start import WarmStart

# The fields of every attention stack, which the encoder-decoder takes from the encoder.
_STACK_FIELDS = tuple(f.name for f in dataclasses.fields(AttentionStackConfig))


def seq2seq_config(encoder: EncoderOnlyConfig) -> TransformerConfig:
    """The encoder-decoder of the same architecture as ``encoder`` (see the module doc)."""
    stack = {name: getattr(encoder, name) for name in _STACK_FIELDS}
    return TransformerConfig(
        **stack,
        num_encoder_layers=encoder.num_layers,
        num_decoder_layers=encoder.num_layers,
        src_vocab_size=encoder.vocab_size,
        tgt_vocab_size=encoder.vocab_size,
        share_embeddings="all",
        pad_id=encoder.pad_id,
        bos_id=encoder.bos_id,
        eos_id=encoder.eos_id,
    )


def seq2seq_state(
    encoder: EncoderOnlyConfig, state: dict[str, Tensor], *, seed: int = 0
) -> tuple[TransformerConfig, dict[str, Tensor]]:
    """The encoder-decoder's config and complete state dict from an encoder's ``state``."""
    config = seq2seq_config(encoder)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = build_model(config).state_dict()  # the cross-attention's initialisation

    def get(name: str) -> Tensor:
        if name not in state:
            raise CheckpointError(f"the --init encoder has no {name}, which warm-starting needs")
        return state[name]

    positions = get("embed.positions.weight").clone()  # (P, D)
    if "token_types.weight" in state:  # segment 0 is added to every single-sentence token
        positions += state["token_types.weight"][0]
    out = dict(fresh)
    for side in ("src_embed", "tgt_embed"):
        out[f"{side}.tokens.weight"] = get("embed.tokens.weight")
        out[f"{side}.positions.weight"] = positions
        for part in ("weight", "bias"):
            out[f"{side}.norm.{part}"] = get(f"embed.norm.{part}")
    for name, value in state.items():
        if not name.startswith("encoder.layers."):
            continue
        out[name] = value
        rest = name.removeprefix("encoder.")
        out[f"decoder.{rest}"] = value.clone()
    out["output_proj.weight"] = out["src_embed.tokens.weight"]  # tied, as the model ties it
    missing = set(fresh) - set(out)
    extra = set(out) - set(fresh)
    if missing or extra:  # an encoder whose layers are not BERT's
        name = sorted(missing or extra)[0]
        raise CheckpointError(f"the --init encoder does not map onto an encoder-decoder: {name}")
    for name, value in out.items():
        if tuple(value.shape) != tuple(fresh[name].shape):
            raise CheckpointError(
                f"the --init encoder's {name} has shape {tuple(value.shape)}, the "
                f"encoder-decoder needs {tuple(fresh[name].shape)}"
            )
    return config, out


# The tasks whose model is an encoder-decoder that an encoder-only --init warm-starts.
WARM_STARTED = ("translation", "summarization", "text_to_text")


def seq2seq_initial(initial: WarmStart, *, seed: int = 0) -> WarmStart:
    """``initial`` (an ``encoder_only`` checkpoint) as a ``transformer`` one to start from."""
    if not isinstance(initial.config, EncoderOnlyConfig):
        return initial
    config, state = seq2seq_state(initial.config, initial.state, seed=seed)
    return WarmStart(config=config, state=state, tokenizer=initial.tokenizer, source=initial.source)
