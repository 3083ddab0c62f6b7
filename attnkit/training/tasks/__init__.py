"""Training tasks: one table, ``TASK_CLASSES``, from a run's ``task`` to the class that
builds and trains it.

Each class implements the protocol in ``tasks/base.py`` (``Task``), and its
classmethod ``from_run(given)`` (``TaskInputs``: the run, a given tokenizer, the
warm start, a log) reads the run's data and builds it: the builder sits beside
the task. ``attnkit.training.loop.Trainer``
trains any of them.

To add a task (NER, QA, ...):

1. write ``tasks/<name>.py``: a class with ``name``, ``betas``/``eps``,
   ``from_run`` and the protocol's methods (``tasks/text_classification.py``
   is a short example); ``start`` (``--init``, a ``WarmStart``) gives the
   model config, the tokenizer and the weights (``build_task_model``);
2. add one entry below;
3. name it in ``attnkit.training.config_tasks.TASKS`` (and there, the
   config keys that apply to it), which the run config validates against.
"""

from __future__ import annotations

from attnkit.data.cache import Log
from attnkit.data.tokenizers import Tokenizer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import LossSums, Task, TaskContext, TaskInputs
from attnkit.training.tasks.dataset_source import with_dataset
from attnkit.training.tasks.image import ImageClassificationTask
from attnkit.training.tasks.instruction import InstructionTask
from attnkit.training.tasks.language_model import CausalLMTask, MaskedLMTask
from attnkit.training.tasks.next_sentence import NextSentenceTask
from attnkit.training.tasks.question_answering import QuestionAnsweringTask
from attnkit.training.tasks.sentence_similarity import SentenceSimilarityTask
from attnkit.training.tasks.span_corruption import SpanCorruptionTask
from attnkit.training.tasks.summarization import SummarizationLMTask, SummarizationTask
from attnkit.training.tasks.text_classification import TextClassificationTask
from attnkit.training.tasks.text_to_text import TextToTextTask
from attnkit.training.tasks.token_classification import TokenClassificationTask
from attnkit.training.tasks.translation import TranslationTask
from attnkit.training.warm_start import WarmStart
from attnkit.training.warm_start_seq2seq import WARM_STARTED, seq2seq_initial

TASK_CLASSES: dict[str, type[Task]] = {
    "translation": TranslationTask,  # an encoder-decoder on parallel text
    "lm": CausalLMTask,  # a decoder-only causal LM on one text file
    "mlm": MaskedLMTask,  # an encoder-only masked LM (train.nsp: NextSentenceTask)
    "span_corruption": SpanCorruptionTask,  # T5's pre-training on one text file
    "image_classification": ImageClassificationTask,  # ViT / Swin on labelled images
    "text_classification": TextClassificationTask,  # an encoder on labelled sentences
    "instruction": InstructionTask,  # a decoder-only LM on conversations (answers scored)
    "text_to_text": TextToTextTask,  # an encoder-decoder on several prefixed corpora
    "sentence_similarity": SentenceSimilarityTask,  # sentence embeddings on sentence pairs
    "token_classification": TokenClassificationTask,  # an encoder tags words (named entities)
    "question_answering": QuestionAnsweringTask,  # an encoder finds answers in a context
    "summarization": SummarizationTask,  # texts and their summaries (seq2seq or an LM)
}


def task_from_run(
    run: RunConfig,
    tokenizer: Tokenizer | None = None,
    start: WarmStart | None = None,
    *,
    log: Log | None = None,
) -> Task:
    """Read the run's data and build its task (``TASK_CLASSES[run.task].from_run``).

    A given ``tokenizer`` (a resumed run's) is used as it is, otherwise one is
    trained on the training data (images need none). ``start`` (``--init``,
    ``attnkit.training.warm_start``): the model's architecture, tokenizer and
    starting weights come from that checkpoint. Text data is prepared (or
    reused) as ``data.loading`` says (``tasks/corpus.py``); ``log`` hears what
    preparation does and why. Raises ``DataError``/``ConfigError`` naming the
    file or field before anything is written to the run directory.
    ``data.hf_dataset`` is read here, once, into files (``tasks/dataset_source.py``).
    """
    run = with_dataset(run, log=log)
    if start is not None:
        tokenizer = start.tokenizer
        if run.task in WARM_STARTED:  # an encoder-only start: its layers in both stacks
            start = seq2seq_initial(start, seed=run.train.seed)
    return TASK_CLASSES[run.task].from_run(TaskInputs(run, tokenizer, start, log))


__all__ = [
    "TASK_CLASSES",
    "CausalLMTask",
    "ImageClassificationTask",
    "InstructionTask",
    "LossSums",
    "MaskedLMTask",
    "NextSentenceTask",
    "Task",
    "TaskContext",
    "TaskInputs",
    "SpanCorruptionTask",
    "SummarizationLMTask",
    "SummarizationTask",
    "TextClassificationTask",
    "TextToTextTask",
    "TokenClassificationTask",
    "TranslationTask",
    "task_from_run",
]
