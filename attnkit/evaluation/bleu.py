"""Corpus BLEU and chrF through sacreBLEU, with the signatures that make scores comparable.

Two BLEU flavours:

* ``bleu``: sacreBLEU's default, cased, on detokenized text with its ``13a``
  tokenizer. Report this one; its signature says exactly how it was computed.
* ``bleu_lc``: the same but lowercased (``lowercase=True, tokenize="13a"``).
  Published Multi30k results usually give *tokenized, lowercased* BLEU
  (``multi-bleu.perl`` on Moses-tokenized text); this is the closest sacreBLEU
  setting, for comparing with those tables. It is not identical to them (13a is
  not the Moses tokenizer), so cite it with its signature.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from attnkit.errors import AttnkitError, UsageError


def _import_sacrebleu() -> ModuleType:
    try:
        import sacrebleu
    except ImportError:
        raise AttnkitError(
            "BLEU needs the 'sacrebleu' package: pip install 'attnkit[train]'"
        ) from None
    return sacrebleu


def corpus_scores(
    hyps: Sequence[str], refs: Sequence[str], *, tokenize: str = "13a"
) -> dict[str, float | str]:
    """BLEU, lowercased BLEU and chrF of detokenized ``hyps`` against one reference each.

    ``tokenize`` is sacreBLEU's tokenizer for ``bleu`` (default ``13a``, the
    standard); ``"char"`` suits outputs without spaces, such as compounds.

    Returns plain floats (0-100) under ``bleu``, ``bleu_lc``, ``chrf`` and the
    sacreBLEU signature strings under ``bleu_signature``, ``bleu_lc_signature``,
    ``chrf_signature``.
    """
    if len(hyps) != len(refs):
        raise UsageError(f"got {len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise UsageError("cannot score an empty set of hypotheses")
    sb = _import_sacrebleu()
    hyps, ref_streams = list(hyps), [list(refs)]
    scores: dict[str, float | str] = {}
    metrics = {
        "bleu": sb.metrics.BLEU(tokenize=tokenize),
        "bleu_lc": sb.metrics.BLEU(lowercase=True, tokenize="13a"),
        "chrf": sb.metrics.CHRF(),
    }
    for name, metric in metrics.items():
        scores[name] = float(metric.corpus_score(hyps, ref_streams).score)
        scores[f"{name}_signature"] = str(metric.get_signature())
    return scores
