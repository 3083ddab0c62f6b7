"""BERT's token-level task heads, in both directions: ``BertForTokenClassification`` and
``BertForQuestionAnswering`` <-> attnkit's token head (``label_level="token"``).

Both are one linear layer on every token's final hidden state (with dropout
before it), which is attnkit's ``TokenClassificationHead``
(``token_classifier.classifier``):

* ``BertForTokenClassification``: ``classifier.{weight,bias}``, one row per
  label; ``config.json``'s ``id2label`` -> ``label_names`` (in id order), so
  ``attnkit tag`` prints the model's own tags;
* ``BertForQuestionAnswering``: ``qa_outputs.{weight,bias}``, two rows, the
  start and end scores (transformers splits the logits in that order) ->
  ``label_names = ("start", "end")``, what ``attnkit answer`` and ``task:
  question_answering`` read.

Neither HF class has a pooler (``add_pooling_layer=False``) or an MLM head:
an import drops a stray ``pooler.dense`` and gets the placeholder MLM head
(``attnkit.interop.hf.bert``); an export writes neither.

A file is a token classifier when ``config.json``'s ``architectures`` says
so (its ``classifier`` has the shape of ``BertForSequenceClassification``'s),
and a question-answering model when it holds ``qa_outputs``. The head rules
are data (``TASK_HEADS``); ``attnkit.interop.hf.bert`` adds the one found to
its key table, ``attnkit.interop.hf.bert_export`` reads it backwards.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from attnkit.evaluation.question_answering import LABELS
from attnkit.interop.keytable import Rule

HEAD_KEY = "token_classifier.classifier"


@dataclass(frozen=True)
class TaskHead:
    """A transformers task class whose head is attnkit's token head.

    Attributes:
        architecture: the class (``config.json``'s ``architectures`` entry).
        task: the attnkit task that trains such a head (``token_classification``, ...).
        rule: our head's key <-> theirs (``C`` rows: the labels).
        labels: the label names the head always has (QA's start and end); ``None``:
            they come from ``id2label``.
    """

    architecture: str
    task: str
    rule: Rule
    labels: tuple[str, ...] | None = None

    @property
    def their_weight(self) -> str:
        return self.rule.their_keys[0].replace("{wb}", "weight")


TOKEN_CLASSIFICATION = TaskHead(
    "BertForTokenClassification", "token_classification",
    Rule(f"{HEAD_KEY}.{{wb}}", "classifier.{wb}", "C D"),
)  # fmt: skip
QUESTION_ANSWERING = TaskHead(
    "BertForQuestionAnswering", "question_answering",
    Rule(f"{HEAD_KEY}.{{wb}}", "qa_outputs.{wb}", "C D"), LABELS,
)  # fmt: skip
TASK_HEADS = (TOKEN_CLASSIFICATION, QUESTION_ANSWERING)


def task_head_of(architectures: object, keys: Collection[str]) -> TaskHead | None:
    """The token-level head of a BERT file holding ``keys`` (``bert.`` prefix optional),
    or ``None`` (a sequence classifier, an MLM, an encoder alone)."""
    has = {k.removeprefix("bert.") for k in keys}
    if QUESTION_ANSWERING.their_weight in has:
        return QUESTION_ANSWERING
    named = architectures if isinstance(architectures, list) else []
    if TOKEN_CLASSIFICATION.architecture in named and TOKEN_CLASSIFICATION.their_weight in has:
        return TOKEN_CLASSIFICATION
    return None


def labels_from_hf(id2label: object, count: int) -> tuple[str, ...]:
    """``id2label`` (``{"0": "O", "1": "B-PER", ...}``) as ``count`` names in id order;
    ``()`` (numbered labels) when it is absent or does not name ids ``0 .. count - 1``."""
    if not isinstance(id2label, Mapping):
        return ()
    names: dict[int, str] = {}
    for key, value in id2label.items():
        if not isinstance(value, str) or not str(key).isdigit():
            return ()
        names[int(key)] = value
    if sorted(names) != list(range(count)):
        return ()
    return tuple(names[i] for i in range(count))


def labels_to_hf(names: Sequence[str], count: int) -> tuple[dict[int, str], dict[str, int]]:
    """``(id2label, label2id)`` for transformers' config: our names, or ``LABEL_i``."""
    named = list(names) or [f"LABEL_{i}" for i in range(count)]
    return dict(enumerate(named)), {name: i for i, name in enumerate(named)}
