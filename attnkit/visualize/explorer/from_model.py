"""Explorer examples from a model: one forward pass with ``need_weights=True``.

Each function takes token ids that were already decoded (a translation, a
continuation, a masked text), runs the model once more with attention maps
requested, drops the batch axis and returns an :class:`ExplorerExample`:

* translation (Transformer): encoder self-, decoder self- and cross-attention,
  teacher-forced on ``BOS + output``, so row ``i`` of a decoder map is where the
  model looked while predicting output token ``i`` (EOS last);
* translation (RNN with attention): the one cross-attention map, one layer of
  one head;
* causal LM: the self-attention over prompt + continuation (``"sequence"``);
* masked LM: the self-attention over the input, mask markers included;
* text classifier: the self-attention over ``[CLS] text [SEP]`` (token types
  for a pair), the labels with their probabilities as the n-best list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnkit.visualize.attention import token_strings
from attnkit.visualize.explorer.payload import AttentionGroup, ExplorerExample, Hypothesis

__all__ = ["causal_lm_example", "classifier_example", "masked_lm_example", "seq2seq_example"]


def _layers(weights: Sequence[torch.Tensor] | None) -> list[Any]:
    """Per-layer ``(B, h, Tq, Tk)`` -> per-layer ``(h, Tq, Tk)`` numpy arrays of row 0."""
    return [w[0].detach().float().cpu().numpy() for w in weights or ()]


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def seq2seq_example(
    model: Any,
    tokenizer: Any,
    src: Sequence[int],
    nbest: Sequence[tuple[Sequence[int], float]],
    *,
    title: str = "",
) -> ExplorerExample:
    """The attention behind the best translation of one source.

    Args:
        src: source ids, EOS last (as decoded).
        nbest: ``(output ids without BOS/EOS, score)``, best first; at least one.

    Raises:
        ValueError: the model has no attention (an RNN with ``attention: none``).
    """
    if not nbest:
        raise ValueError("nbest: needs at least one hypothesis")
    best = list(nbest[0][0])
    device = _device(model)
    out = model(
        torch.tensor([list(src)], device=device),
        torch.tensor([[tokenizer.bos_id, *best]], device=device),
        need_weights=True,
    )
    if out.cross_attentions is None:
        raise ValueError("model.attention: none; this RNN has no attention to show")
    groups = [
        AttentionGroup(name, _layers(weights))
        for name, weights in (
            ("encoder self-attention", out.encoder_attentions),
            ("decoder self-attention", out.decoder_self_attentions),
            ("cross-attention", out.cross_attentions),
        )
        if weights
    ]
    return ExplorerExample(
        kind="seq2seq",
        source=token_strings(tokenizer, src),
        target=token_strings(tokenizer, [*best, tokenizer.eos_id]),
        nbest=[Hypothesis(tokenizer.decode(list(ids)), float(s)) for ids, s in nbest],
        groups=groups,
        title=title,
    )


@torch.no_grad()
def causal_lm_example(
    model: Any,
    tokenizer: Any,
    prompt: Sequence[int],
    continuation: Sequence[int],
    *,
    title: str = "",
) -> ExplorerExample:
    """The self-attention over ``prompt + continuation`` (the last ``max_len`` tokens).

    Past the model's context only the last window is shown (the window the last
    token was predicted from); at least one prompt token stays ``source``.
    """
    ids = [*prompt, *continuation]
    window = ids[-model.config.max_len :]
    n_prompt = max(1, len(prompt) - (len(ids) - len(window)))
    out = model(torch.tensor([window], device=_device(model)), need_weights=True)
    labels = token_strings(tokenizer, window)
    return ExplorerExample(
        kind="causal_lm",
        source=labels[:n_prompt],
        target=labels[n_prompt:],
        nbest=[Hypothesis(tokenizer.decode(list(continuation)), float("nan"))],
        groups=[AttentionGroup("self-attention", _layers(out.attentions))],
        output=tokenizer.decode(list(continuation)),
        title=title,
    )


@torch.no_grad()
def masked_lm_example(
    model: Any,
    tokenizer: Any,
    ids: Sequence[int],
    *,
    output: str = "",
    title: str = "",
) -> ExplorerExample:
    """The self-attention of an encoder-only model over ``ids`` (mask ids shown as [MASK])."""
    out = model(torch.tensor([list(ids)], device=_device(model)), need_weights=True, mlm=False)
    mask_id = getattr(model.config, "mask_id", None)
    labels = ["[MASK]" if i == mask_id else token_strings(tokenizer, [i])[0] for i in ids]
    return ExplorerExample(
        kind="masked_lm",
        source=labels,
        nbest=[Hypothesis(output, float("nan"))] if output else [],
        groups=[AttentionGroup("self-attention", _layers(out.attentions))],
        output=output,
        title=title,
    )


@torch.no_grad()
def classifier_example(
    model: Any,
    tokenizer: Any,
    ids: Sequence[int],
    token_types: Sequence[int] | None,
    label_names: Sequence[str],
    *,
    title: str = "",
) -> ExplorerExample:
    """A text classifier's self-attention over ``ids`` (``[CLS] a [SEP] ...``); the n-best list
    is every label with its probability, most likely first."""
    device = _device(model)
    types = None
    if token_types is not None and model.config.type_vocab_size > 0:
        types = torch.tensor([list(token_types)], device=device)
    out = model(torch.tensor([list(ids)], device=device), need_weights=True, mlm=False,
                token_types=types)  # fmt: skip
    probs = out.class_logits[0].float().softmax(-1).tolist()
    ranked = sorted(zip(label_names, probs), key=lambda x: -x[1])
    return ExplorerExample(
        kind="masked_lm",
        source=token_strings(tokenizer, ids),
        nbest=[Hypothesis(name, float(p)) for name, p in ranked],
        groups=[AttentionGroup("self-attention", _layers(out.attentions))],
        output=f"{ranked[0][0]} ({ranked[0][1]:.3f})",
        title=title,
    )
