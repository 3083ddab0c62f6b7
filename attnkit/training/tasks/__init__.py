"""Training tasks: a plain table ``task name -> task class``, and building one from a run.

``translation`` (encoder-decoder on parallel text), ``lm`` (decoder-only
causal LM), ``mlm`` (encoder-only masked LM), ``image_classification``
(a Vision Transformer on labelled images) and ``text_classification`` (an
encoder-only model on labelled sentences or pairs) each implement the protocol in
``tasks/base.py``; ``attnkit.training.loop.Trainer`` trains any of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError
from attnkit.training.init import Initial
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import LossSums, Task, TaskContext
from attnkit.training.tasks.image import ImageClassificationTask, load_images
from attnkit.training.tasks.language_model import CausalLMTask, MaskedLMTask
from attnkit.training.tasks.text_classification import (
    TextClassificationTask,
    build_classifier_tokenizer,
    load_labelled,
)
from attnkit.training.tasks.translation import TranslationTask, build_tokenizer, load_parallel

TASK_CLASSES: dict[str, type[Any]] = {
    "translation": TranslationTask,
    "lm": CausalLMTask,
    "mlm": MaskedLMTask,
    "image_classification": ImageClassificationTask,
    "text_classification": TextClassificationTask,
}


def task_from_run(
    run: RunConfig, tokenizer: Tokenizer | None = None, initial: Initial | None = None
) -> Task:
    """Read the run's data and build its task; a given ``tokenizer`` (a resumed run's) is
    used as it is, otherwise one is trained on the training data (images need none).

    ``initial`` (``--init``, ``attnkit.training.init.load_initial``): the model's
    architecture, tokenizer and starting weights come from that checkpoint.
    Raises ``DataError``/``ConfigError`` naming the file or field before anything is written.
    """
    data = run.data
    if initial is not None:
        tokenizer = initial.tokenizer
    if run.task == "image_classification":
        train_images, held_out = load_images(run, initial)
        return ImageClassificationTask(run, train_images, held_out, initial=initial)
    if run.task == "text_classification":
        examples = load_labelled(data, data.train, "data.train")
        assert examples is not None  # data.train is never null
        valid_examples = load_labelled(data, data.valid, "data.valid")
        tokenizer = tokenizer or build_classifier_tokenizer(run.tokenizer, examples)
        return TextClassificationTask(run, tokenizer, examples, valid_examples, initial=initial)
    if run.task == "translation":
        train = load_parallel(data, data.train)
        valid = load_parallel(data, data.valid) if data.valid else None
        tokenizer = tokenizer or build_tokenizer(run.tokenizer, list(train))
        valid_pairs = list(valid) if valid is not None else None
        return TranslationTask(
            run, tokenizer, list(train), valid_pairs, dropped_empty=train.dropped_empty,
            initial=initial,
        )  # fmt: skip
    from attnkit.data.lm import load_lm_corpus

    if data.text is None:
        raise ConfigError(
            f"data.text: the {run.task} task reads one text file; "
            "set data.text (a path relative to data.dir)"
        )
    corpus = load_lm_corpus(
        Path(data.dir) / data.text,
        tokenizer,
        kind=run.tokenizer.kind,
        vocab_size=run.tokenizer.vocab_size if run.tokenizer.kind == "bpe" else None,
        valid_fraction=data.held_out_fraction(run.task),
    )
    return TASK_CLASSES[run.task](run, corpus, initial=initial)


__all__ = [
    "TASK_CLASSES",
    "CausalLMTask",
    "ImageClassificationTask",
    "LossSums",
    "MaskedLMTask",
    "Task",
    "TaskContext",
    "TextClassificationTask",
    "TranslationTask",
    "task_from_run",
]
