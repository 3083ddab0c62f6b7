"""Prompt lookup for encoder-decoders: greedy search whose drafts come from the source.

A summary quotes its e-mail and a translation copies names, numbers and
shared words from its source. With one tokenizer for both sides the source's
ids are the output's vocabulary, so the n-gram lookup of
``attnkit.decoding.lookup`` runs over the source followed by the output so
far: when the output's last tokens occurred earlier (in the source or in the
output itself), the tokens that followed them there are the draft. Each round
feeds the newest token and the draft in one decoder pass
(``Verifier.verify``), keeps the draft's longest prefix equal to the model's
argmax, then the model's own argmax after it, and rolls the self-attention
cache back to what was kept (``RewindableState.truncate``); the encoder and
the cross-attention keys/values are computed once, by ``start``.

The output is greedy search's (``attnkit.decoding.greedy``) token for token,
with the same length limit (``floor(max_len_a * src_len + max_len_b)``,
capped at ``max_len``) and the same summed log-probability, up to the
floating-point differences between scoring several positions in one pass and
one at a time (tested on random models: identical); with dynamic int8 linears
(``--precision int8``: one activation scale per call) a pass over several tokens
rounds differently, so a near-tie may go the other way. Greedy only: a beam's
rows would each need their own draft and rollback. One source at a time; a
state that cannot roll back (linear attention) is decoded by plain greedy search.

Shapes: ``S`` source length, ``V`` vocabulary, ``d`` draft length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from attnkit.decoding.common import DecodeResult, Hypothesis, check_int, log_probs, output_limits
from attnkit.decoding.greedy import greedy_search
from attnkit.decoding.lookup import DEFAULT_NGRAM, NgramIndex
from attnkit.decoding.protocol import AnyStepper, RewindableState, Verifier
from attnkit.decoding.speculative import SpeculativeStats
from attnkit.errors import UsageError


def _verifier(model: AnyStepper) -> Verifier[Any]:
    """``model`` as what checks a draft, or the one-line refusal."""
    if not isinstance(model, Verifier):
        raise UsageError(f"--prompt-lookup: {type(model).__name__} cannot verify a draft "
                         "(Transformer encoder-decoders and decoder-only LMs can)")  # fmt: skip
    return model


@torch.no_grad()
def lookup_greedy(
    model: AnyStepper,
    src_ids: Tensor,
    *,
    num_tokens: int = 10,
    max_ngram: int = DEFAULT_NGRAM,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    max_len: int | None = None,
    stepper: AnyStepper | None = None,
    stats: SpeculativeStats | None = None,
) -> Hypothesis:
    """Greedy search's output for one source ``src_ids`` ``(1, S)``, drafted from it.

    Args:
        model: an encoder-decoder that is a ``Verifier`` (``EncoderDecoder``), eval mode.
        num_tokens: the longest draft ``k`` (>= 1); ``max_ngram``: the longest suffix
            looked up (>= 1).
        max_len_a, max_len_b, max_len: the output's length limit, as ``greedy_search``'s.
        stepper: what starts and steps ``model`` (the inference plan's; default: the model).
        stats: filled in with passes, drafts and acceptances.

    Returns:
        the output (no BOS/EOS) and its summed log-probability (EOS included).
    """
    check_int("num_tokens", num_tokens, 1)
    check_int("max_ngram", max_ngram, 1)
    if src_ids.dim() != 2 or src_ids.size(0) != 1:
        raise UsageError(f"prompt lookup: one source (1, S), got {tuple(src_ids.shape)}")
    verifier = _verifier(model)
    steps = model if stepper is None else stepper
    stats = SpeculativeStats() if stats is None else stats
    limits, bound = output_limits(src_ids, steps.pad_id, max_len_a=max_len_a,
                                  max_len_b=max_len_b, max_len=max_len)  # fmt: skip
    limit, eos = int(limits[0]), steps.eos_id
    state = steps.start(src_ids, max_steps=bound)
    if not isinstance(state, RewindableState) or not state.rewindable:
        plain = greedy_search(steps, src_ids, max_len_a=max_len_a, max_len_b=max_len_b,
                              max_len=max_len)  # fmt: skip
        return plain.nbest[0][0]
    device = src_ids.device
    bos = torch.full((1,), steps.bos_id, dtype=torch.long, device=device)
    logits, state = steps.step(bos, state)  # (1, V)
    stats.forwards += 1
    # The drafts' material: the source (its pad left out), then the output as it grows.
    seq = [t for t in src_ids[0].tolist() if t != steps.pad_id]
    start = len(seq)
    index = NgramIndex(seq, max_ngram)
    logp = log_probs(logits[0])
    token = int(logp.argmax())
    score = float(logp[token])
    while True:
        # The cache holds BOS and the output before ``token``, the model's newest pick.
        seq.append(token)
        stats.tokens += 1
        produced = len(seq) - start
        if token == eos or produced >= limit:
            break
        k = min(num_tokens, limit - produced - 1)  # the last token comes from a pass
        draft = index.draft(k) if k > 0 else []
        fed = torch.tensor([[token, *draft]], dtype=torch.long, device=device)
        if not draft:
            logits, state = steps.step(fed[:, 0], state)
            every = logits  # (1, V)
        else:
            every3, state = verifier.verify(fed, state)  # (1, 1 + d, V)
            every = every3[0]
            stats.rounds += 1
            stats.drafted += len(draft)
        stats.forwards += 1
        logp_all = log_probs(every)  # (1 + d, V)
        choices = logp_all.argmax(dim=-1).tolist()
        n = 0
        while n < len(draft) and choices[n] == draft[n]:
            n += 1
        stats.accepted += n
        # An EOS among the accepted draft tokens ends the output there.
        kept = draft[:n]
        if eos in kept:
            kept = kept[: kept.index(eos) + 1]
        for i, t in enumerate(kept):
            score += float(logp_all[i, t])
            seq.append(t)
            stats.tokens += 1
        if kept and kept[-1] == eos:
            break
        token = int(choices[n])
        score += float(logp_all[n, token])
        if n < len(draft):
            state = state.truncate(len(seq) - start + 1)  # BOS and the output so far
    out = seq[start:]
    return Hypothesis(out[:-1] if out[-1] == eos else out, score)


def lookup_decode_ids(
    model: AnyStepper,
    src: Sequence[Sequence[int]],
    *,
    num_tokens: int,
    max_len_b: int = 50,
    max_len: int | None = None,
    device: torch.device | str = "cpu",
    stepper: AnyStepper | None = None,
    stats: SpeculativeStats | None = None,
) -> list[DecodeResult]:
    """``decode_ids(..., beam=1)``'s results (``attnkit.decoding.text``), each source
    decoded alone by ``lookup_greedy``; a source of EOS alone gives an empty output."""
    _verifier(model)  # before any work: the first text may be blank
    eos = model.eos_id
    results = []
    for ids in src:
        if all(t == eos for t in ids):
            hyp = Hypothesis([], 0.0)
        else:
            x = torch.tensor([list(ids)], dtype=torch.long, device=device)
            hyp = lookup_greedy(model, x, num_tokens=num_tokens, max_len_b=max_len_b,
                                max_len=max_len, stepper=stepper, stats=stats)  # fmt: skip
        results.append(DecodeResult([hyp.tokens], [hyp.score], [[hyp]]))
    return results
