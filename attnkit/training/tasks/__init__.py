"""Training tasks: a plain table ``task name -> task class``, and building one from a run.

``translation`` (encoder-decoder on parallel text), ``lm`` (decoder-only
causal LM), ``mlm`` (encoder-only masked LM), ``image_classification``
(a Vision Transformer on labelled images) and ``text_classification`` (an
encoder-only model on labelled sentences or pairs), ``span_corruption`` (T5's
pre-training of an encoder-decoder on one text file) and ``text_to_text``
(an encoder-decoder on several prefixed corpora) and ``summarization`` (texts
and their summaries: translation for an encoder-decoder, instruction tuning
for a decoder-only LM; ``tasks/summarization.py``) each implement the protocol in
``tasks/base.py``; ``attnkit.training.loop.Trainer`` trains any of them.
``mlm`` with ``train.nsp`` adds BERT's next-sentence prediction (``tasks/next_sentence.py``).
"""

from __future__ import annotations

from attnkit.data.cache import Log
from attnkit.data.tokenizers import Tokenizer
from attnkit.training.init import Initial
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import LossSums, Task, TaskContext
from attnkit.training.tasks.corpus import lm_corpus, translation_data
from attnkit.training.tasks.dataset_source import with_dataset
from attnkit.training.tasks.image import ImageClassificationTask, load_images
from attnkit.training.tasks.instruction import InstructionTask, instruction_task
from attnkit.training.tasks.language_model import CausalLMTask, MaskedLMTask
from attnkit.training.tasks.next_sentence import NextSentenceTask, next_sentence_task
from attnkit.training.tasks.span_corruption import SpanCorruptionTask
from attnkit.training.tasks.summarization import (
    SummarizationLMTask,
    SummarizationTask,
    summarization_task,
)
from attnkit.training.tasks.text_classification import (
    TextClassificationTask,
    build_classifier_tokenizer,
    load_labelled,
)
from attnkit.training.tasks.text_to_text import TextToTextTask
from attnkit.training.tasks.translation import TranslationTask
from attnkit.training.warm_start_seq2seq import seq2seq_initial

# The tasks on one text file, built from the run and the corpus alike.
TEXT_TASKS: dict[str, type[CausalLMTask] | type[MaskedLMTask] | type[SpanCorruptionTask]] = {
    "lm": CausalLMTask,
    "mlm": MaskedLMTask,
    "span_corruption": SpanCorruptionTask,
}
TASK_CLASSES: dict[str, type[Task]] = {
    "translation": TranslationTask,
    **TEXT_TASKS,
    "image_classification": ImageClassificationTask,
    "text_classification": TextClassificationTask,
    "instruction": InstructionTask,
    "text_to_text": TextToTextTask,
    "summarization": SummarizationTask,
}
# The tasks that train an encoder-decoder: an encoder-only --init (BERT) is warm-started
# into one (Rothe et al., 2020; attnkit.training.warm_start_seq2seq).
WARM_STARTED = ("translation", "summarization", "text_to_text")


def task_from_run(
    run: RunConfig,
    tokenizer: Tokenizer | None = None,
    initial: Initial | None = None,
    *,
    log: Log | None = None,
) -> Task:
    """Read the run's data and build its task; a given ``tokenizer`` (a resumed run's) is
    used as it is, otherwise one is trained on the training data (images need none).

    ``initial`` (``--init``, ``attnkit.training.init.load_initial``): the model's
    architecture, tokenizer and starting weights come from that checkpoint.
    Text data is prepared (or reused) as ``data.loading`` says
    (``tasks/corpus.py``); ``log`` hears what preparation does and why.
    Raises ``DataError``/``ConfigError`` naming the file or field before anything
    is written to the run directory. ``data.hf_dataset`` is read here, once, into files
    (``tasks/dataset_source.py``).
    """
    run = with_dataset(run, log=log)
    data = run.data
    if initial is not None:
        tokenizer = initial.tokenizer
        if run.task in WARM_STARTED:
            initial = seq2seq_initial(initial, seed=run.train.seed)
    if run.task == "instruction":
        return instruction_task(run, tokenizer, initial)
    if run.task == "image_classification":
        train_images, held_out = load_images(run, initial)
        return ImageClassificationTask(run, train_images, held_out, initial=initial)
    if run.task == "text_classification":
        examples = load_labelled(data, data.one_file("train", run.task), "data.train")
        assert examples is not None  # data.train is never null
        valid_examples = load_labelled(data, data.one_file("valid", run.task), "data.valid")
        tokenizer = tokenizer or build_classifier_tokenizer(run.tokenizer, examples)
        return TextClassificationTask(run, tokenizer, examples, valid_examples, initial=initial)
    if run.task == "summarization":
        return summarization_task(run, tokenizer, initial)
    if run.task == "text_to_text":
        return TextToTextTask(run, tokenizer, initial=initial)
    if run.task == "translation":
        return TranslationTask(
            run, **translation_data(run, tokenizer, log=log), initial=initial
        )  # fmt: skip
    if run.task == "mlm" and run.train.nsp:
        return next_sentence_task(run, tokenizer, initial, log=log)
    corpus, release = lm_corpus(run, tokenizer, log=log)
    return TEXT_TASKS[run.task](run, corpus, release, initial=initial)


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
    "SpanCorruptionTask",
    "SummarizationLMTask",
    "SummarizationTask",
    "TextClassificationTask",
    "TextToTextTask",
    "TranslationTask",
    "task_from_run",
]
