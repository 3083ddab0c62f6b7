"""The explorer payload of one request, per kind of model, and the note that says how
it was made.

Each runs the model once more with ``need_weights`` over what the request read
and produced (``attnkit.visualize.explorer.from_model``) and builds the page's
payload from it. They run in the batcher's worker thread (or the calling thread
under ``attnkit explore``); ``ModelHost.translation_payload``, ``causal_payload``
and ``masked_payload`` call them with the engine's checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnkit.checkpoints.loading import LoadedModel
from attnkit.decoding.common import DecodeResult
from attnkit.serve.mask_filling import MaskedText
from attnkit.serve.model_host_types import ExplorePayload, RequestError

__all__ = [
    "EXPLORE_NOTES", "ExplorePayload", "causal_payload", "masked_payload", "translation_payload",
]  # fmt: skip

EXPLORE_NOTES: dict[str, str] = {
    "seq2seq": "translated with beam search, then the source and BOS + the best output were "
    "run once more with need_weights (teacher forcing): encoder self-, decoder self- and "
    "cross-attention (an RNN: its one cross-attention map); row i is output token i",
    "causal_lm": "the prompt was continued (greedily in /v1/explore), then prompt + "
    "continuation was run once with need_weights: causal self-attention over the sequence "
    "(rows: every token; the prompt is 'source', the continuation 'target')",
    "masked_lm": "the input (mask markers as the mask token) was run once with need_weights: "
    "bidirectional self-attention over the input tokens; 'output' is the text with every "
    "mask filled by its most likely token",
}


def translation_payload(
    loaded: LoadedModel, src: Sequence[int], result: DecodeResult
) -> ExplorePayload:
    """A translation's payload: ``src`` and its n-best list (``result``), teacher-forced."""
    from attnkit.visualize.explorer import build_payload
    from attnkit.visualize.explorer.from_model import seq2seq_example

    try:
        with torch.no_grad():
            example = seq2seq_example(
                loaded.model,
                loaded.tokenizer,
                src,
                [(h.tokens, h.score) for h in result.nbest[0]],
                title=loaded.family.name,
            )
    except ValueError as e:
        raise RequestError(f"explore: {e}", status=400) from None
    return build_payload(example)


def causal_payload(
    loaded: LoadedModel, prompt: Sequence[int], new: Sequence[int]
) -> ExplorePayload:
    """A generation's payload: ``prompt`` and its continuation ``new``."""
    from attnkit.visualize.explorer import build_payload
    from attnkit.visualize.explorer.from_model import causal_lm_example

    with torch.no_grad():
        example = causal_lm_example(
            loaded.model, loaded.tokenizer, prompt, new, title=loaded.family.name
        )
    return build_payload(example)


def masked_payload(loaded: LoadedModel, masked: MaskedText, filled: str) -> ExplorePayload:
    """A fill-mask request's payload: the masked text, ``filled`` as its output."""
    from attnkit.visualize.explorer import build_payload
    from attnkit.visualize.explorer.from_model import masked_lm_example

    with torch.no_grad():
        example = masked_lm_example(
            loaded.model, loaded.tokenizer, masked.ids, output=filled,
            title=loaded.family.name,
        )  # fmt: skip
    return build_payload(example)
