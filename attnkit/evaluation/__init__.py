"""Evaluation: sacreBLEU scores (imported when first used) and perplexity."""

from attnkit.evaluation.bleu import corpus_scores
from attnkit.evaluation.perplexity import perplexity

__all__ = ["corpus_scores", "perplexity"]
