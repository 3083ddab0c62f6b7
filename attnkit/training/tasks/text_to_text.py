"""``task: text_to_text``: one encoder-decoder on several tasks, each a corpus with a prefix (T5).

T5 (Raffel et al., 2020, §2.4) "casts every task as text to text": the input
names the task in a prefix (``"translate German to English: "``, ``"sst2
sentence: "``) and the target is text, a translation or a label's name. Here
every ``data.corpora`` entry is one task:

* ``kind: pairs``: parallel text, read as ``translation`` reads it
  (``{dir}/{train}.{src_lang}`` and ``.{tgt_lang}``, or TSV/JSONL pairs);
* ``kind: labelled``: a labelled TSV/JSONL file (``attnkit.data.classification``,
  SST-2's ``label<TAB>sentence``); the label is the target text.

``prefix`` goes before each source; ``train``/``valid``/``src_lang``/``tgt_lang``
default to those of ``data``. The corpora are read into memory, one tokenizer
is trained on all of them (unless one is given), and training batches mix
them in proportion to ``weight`` (``PairBatches``, as translation's weighted
corpora). The objective, batching, decoding and checkpoints are translation's
(``TranslationTask``); validation adds, per corpus ``name``, greedy BLEU and
exact match (a classification task's accuracy) on its first
``train.valid_bleu_sentences`` validation pairs, beside the loss over all.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, cast

import torch
from torch import nn

from attnkit.data.classification import read_labelled
from attnkit.data.formats import pair_inputs, read_pairs
from attnkit.data.pair_batches import PairBatches, encode_pairs
from attnkit.data.prepared import train_on_pairs
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError
from attnkit.evaluation.perplexity import perplexity, translation_sums
from attnkit.models.protocols import Seq2SeqModel
from attnkit.training import distributed as dist_util
from attnkit.training.runconfig import CorpusConfig, RunConfig
from attnkit.training.tasks.base import Task, TaskInputs
from attnkit.training.tasks.translation import TranslationTask
from attnkit.training.warm_start import WarmStart

Pair = tuple[str, str]


def corpus_name(corpus: CorpusConfig, index: int) -> str:
    return corpus.name or f"corpus{index}"


def read_corpus(run: RunConfig, corpus: CorpusConfig, split: str) -> list[Pair] | None:
    """``(prefix + source, target)`` pairs of one corpus's ``split`` (``None``: no such file)."""
    data = run.data
    entry = getattr(corpus, split) or getattr(data, split)
    if entry is None:
        return None
    if corpus.kind == "labelled":
        if not isinstance(entry, str):
            raise ConfigError(f"data.corpora: a labelled corpus reads one {split} file")
        path = Path(corpus.dir) / entry
        if not path.is_file():
            raise ConfigError(f"data.corpora: {path} is not a file (labelled TSV or JSONL)")
        labelled = read_labelled(path)
        texts = labelled.texts
        if labelled.pairs is not None:  # sentence pairs: both sentences, in order
            texts = [f"{a} {b}" for a, b in zip(texts, labelled.pairs)]
        pairs = list(zip(texts, labelled.labels))
    else:
        src, tgt = corpus.src_lang or data.src_lang, corpus.tgt_lang or data.tgt_lang
        pairs = read_pairs(pair_inputs(corpus.dir, entry, src, tgt),
                           skip_empty=data.skip_empty).pairs  # fmt: skip
    return [(corpus.prefix + s, t) for s, t in pairs]


class TextToTextTask(TranslationTask):
    """Translation's objective over weighted, prefixed corpora (see the module doc)."""

    name: ClassVar[str] = "text_to_text"

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """Several prefixed corpora, read by the task itself."""
        return cls(given.run, given.tokenizer, start=given.start)

    def __init__(
        self,
        run: RunConfig,
        tokenizer: Tokenizer | None = None,
        *,
        start: WarmStart | None = None,
    ) -> None:
        corpora = run.data.corpora
        if not corpora:
            raise ConfigError("data.corpora: text_to_text needs its corpora (one per task)")
        names = [corpus_name(c, i) for i, c in enumerate(corpora)]
        if len(set(names)) != len(names):
            raise ConfigError(f"data.corpora: names must differ, got {names}")
        train = [read_corpus(run, c, "train") or [] for c in corpora]
        for name, pairs in zip(names, train):
            if not pairs:
                raise ConfigError(f"data.corpora: corpus {name!r} has no training pairs")
        valid = [read_corpus(run, c, "valid") for c in corpora]
        self.valid_sets = {name: v for name, v in zip(names, valid) if v}
        tokenizer = tokenizer or train_on_pairs(train, run.tokenizer)[0]
        batches = PairBatches(
            [encode_pairs(pairs, tokenizer) for pairs in train],
            max_len=run.data.max_len, seed=run.train.seed, weights=[c.weight for c in corpora],
        )  # fmt: skip
        every_valid = [p for pairs in self.valid_sets.values() for p in pairs]
        super().__init__(run, tokenizer, batches, every_valid, start=start)
        self.train_sizes = dict(zip(names, map(len, train)))

    def describe(self) -> str:
        sizes = ", ".join(f"{name} {n}" for name, n in self.train_sizes.items())
        return f"text-to-text corpora (training pairs): {sizes}; {super().describe()}"

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """The loss and perplexity over every corpus's validation pairs; per corpus, greedy
        BLEU and exact match on its first ``train.valid_bleu_sentences``."""
        if not self.valid_pairs:
            return {}
        from attnkit.evaluation.bleu import corpus_scores
        from attnkit.inference import translate_texts

        model.eval()
        loss_sum, nll_sum, tokens = translation_sums(
            cast(Seq2SeqModel, model), self.tokenizer, self.valid_pairs,
            label_smoothing=self.cfg.label_smoothing, max_len=self.run.data.max_len,
        )  # fmt: skip
        metrics = {"loss": loss_sum / max(tokens, 1), "ppl": perplexity(nll_sum, max(tokens, 1))}
        n = self.cfg.valid_bleu_sentences
        for name, pairs in self.valid_sets.items() if n else ():
            pairs = pairs[:n]
            with dist_util.gathered_parameters(model):
                hyps = translate_texts(model, self.tokenizer, [s for s, _ in pairs], beam=1,
                                       device=self.context.device)  # fmt: skip
            refs = [t for _, t in pairs]
            bleu = corpus_scores(hyps, refs, tokenize=self.run.decode.bleu_tokenize)["bleu"]
            metrics[f"{name}_bleu"] = float(bleu)
            metrics[f"{name}_exact_match"] = sum(h == t for h, t in zip(hyps, refs)) / len(pairs)
        return metrics
