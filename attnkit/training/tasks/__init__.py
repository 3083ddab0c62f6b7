"""Training tasks: a plain table ``task name -> task class``, and building one from a run.

``translation`` (encoder-decoder on parallel text), ``lm`` (decoder-only
causal LM), ``mlm`` (encoder-only masked LM) and ``image_classification``
(a Vision Transformer on labelled images) each implement the protocol in
``tasks/base.py``; ``attnkit.training.loop.Trainer`` trains any of them.
"""

from __future__ import annotations

from typing import Any

from attnkit.data.cache import Log
from attnkit.data.tokenizers import Tokenizer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import LossSums, Task, TaskContext
from attnkit.training.tasks.corpus import lm_corpus, translation_data
from attnkit.training.tasks.image import ImageClassificationTask, load_images
from attnkit.training.tasks.language_model import CausalLMTask, MaskedLMTask
from attnkit.training.tasks.translation import TranslationTask

TASK_CLASSES: dict[str, type[Any]] = {
    "translation": TranslationTask,
    "lm": CausalLMTask,
    "mlm": MaskedLMTask,
    "image_classification": ImageClassificationTask,
}


def task_from_run(
    run: RunConfig, tokenizer: Tokenizer | None = None, *, log: Log | None = None
) -> Task:
    """Read the run's data and build its task; a given ``tokenizer`` (a resumed run's) is
    used as it is, otherwise one is trained on the training data (images need none).

    Text data is prepared (or reused) as ``data.loading`` says
    (``tasks/corpus.py``); ``log`` hears what preparation does and why.
    Raises ``DataError``/``ConfigError`` naming the file or field before anything
    is written to the run directory.
    """
    if run.task == "image_classification":
        train_images, held_out = load_images(run)
        return ImageClassificationTask(run, train_images, held_out)
    if run.task == "translation":
        return TranslationTask(run, **translation_data(run, tokenizer, log=log))
    corpus, release = lm_corpus(run, tokenizer, log=log)
    return TASK_CLASSES[run.task](run, corpus, release)


__all__ = [
    "TASK_CLASSES",
    "CausalLMTask",
    "ImageClassificationTask",
    "LossSums",
    "MaskedLMTask",
    "Task",
    "TaskContext",
    "TranslationTask",
    "task_from_run",
]
