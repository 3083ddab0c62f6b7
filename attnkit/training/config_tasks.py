"""The tasks ``attnkit train`` runs, and the config keys that only some of them read.

``TASK_KEYS`` maps each such key (``"section.key"``, or a whole section) to the
tasks that read it; ``check_task_keys`` refuses a run that sets one for another
task (an unread key would be a silent no-op), and ``RunConfig.to_dict`` leaves
those keys out of a run's ``run.json``. ``attnkit.training.runconfig``
re-exports every name here.
"""

from __future__ import annotations

from typing import Any, Literal

from attnkit.errors import ConfigError

__all__ = [
    "IMAGE_TASKS",
    "LM_TASKS",
    "SEQ2SEQ_TEXT",
    "TASKS",
    "TASK_KEYS",
    "TEXT_CLASSIFICATION",
    "TEXT_TO_TEXT_CORPUS_KEYS",
    "TOKEN_CLASSIFICATION",
    "Task",
    "check_task_keys",
]

# translation: an encoder-decoder on parallel text; lm: a decoder-only (GPT-style)
# causal LM on one text file; mlm: an encoder-only (BERT-style) masked LM on one;
# image_classification: a Vision Transformer on labelled images; text_classification:
# an encoder-only model labels sentences or sentence pairs; instruction: a pretrained
# decoder-only LM on JSONL conversations, loss on the answers only; span_corruption:
# T5's pre-training of an encoder-decoder on one text file; text_to_text: an
# encoder-decoder on several corpora (pairs, or labelled texts), each with a task prefix;
# sentence_similarity: an encoder's pooled vectors on sentence pairs (Sentence-BERT);
# token_classification: an encoder-only model tags every word (named entities);
# summarization: texts and their summaries, an encoder-decoder or a decoder-only LM.
Task = Literal[
    "translation", "lm", "mlm", "image_classification", "text_classification", "instruction",
    "span_corruption", "text_to_text", "sentence_similarity", "token_classification",
    "question_answering", "summarization",
]  # fmt: skip
TASKS: tuple[str, ...] = (
    "translation", "lm", "mlm", "image_classification", "text_classification", "instruction",
    "span_corruption", "text_to_text", "sentence_similarity", "token_classification",
    "question_answering", "summarization",
)  # fmt: skip
SEQ2SEQ_TEXT = ("translation", "text_to_text", "summarization")  # the tasks on text pairs
TEXT_CLASSIFICATION = ("text_classification",)
TOKEN_CLASSIFICATION = ("token_classification",)  # named entities (tasks/token_classification.py)
QA = ("question_answering",)  # extractive QA (tasks/question_answering.py)
# encoder-only tasks on labelled files, batched by examples (train.batch_size)
EXAMPLE_TASKS = ("text_classification", "sentence_similarity", *TOKEN_CLASSIFICATION, *QA)
LM_TASKS = ("lm", "mlm", "span_corruption")  # the tasks on one text file
IMAGE_TASKS = ("image_classification",)

# Keys that only some tasks read, as "section.key" -> those tasks. A run that sets
# one for another task is an error naming the key (an unread key is a silent no-op).
TASK_KEYS: dict[str, tuple[str, ...]] = {
    "data.src_lang": SEQ2SEQ_TEXT,
    "data.tgt_lang": SEQ2SEQ_TEXT,
    "data.train": (*SEQ2SEQ_TEXT, *EXAMPLE_TASKS, "instruction"),
    "data.valid": (*SEQ2SEQ_TEXT, *EXAMPLE_TASKS, "instruction"),
    "data.test": ("translation",),
    "data.max_len": (*SEQ2SEQ_TEXT, *EXAMPLE_TASKS),
    "data.tag_scheme": TOKEN_CLASSIFICATION,
    "data.doc_stride": QA,
    "data.block_size": (*LM_TASKS, "instruction", "summarization"),
    "data.pack": ("instruction",),
    "data.documents": ("mlm",),
    "data.skip_empty": SEQ2SEQ_TEXT,
    "data.corpora": SEQ2SEQ_TEXT,
    "data.hf_dataset": ("translation", "lm", "mlm", "span_corruption", *TEXT_CLASSIFICATION),
    "data.shuffle_buffer": ("translation",),
    "data.text": LM_TASKS,
    "data.valid_fraction": (*LM_TASKS, *IMAGE_TASKS, "instruction"),
    "data.loading": ("translation", *LM_TASKS),
    "data.cache_dir": ("translation", *LM_TASKS),
    "data.images": IMAGE_TASKS,
    "data.labels": IMAGE_TASKS,
    "data.max_shift": IMAGE_TASKS,
    "train.label_smoothing": (*SEQ2SEQ_TEXT, *IMAGE_TASKS),
    "train.valid_bleu_sentences": SEQ2SEQ_TEXT,
    "train.eval_blocks": (*LM_TASKS, "instruction", "summarization"),
    "train.mask_prob": ("mlm", "span_corruption"),  # span_corruption: the noise density
    "train.nsp": ("mlm",),
    "train.nsp_weight": ("mlm",),
    "train.batch_size": EXAMPLE_TASKS,
    "train.group_by_length": EXAMPLE_TASKS,
    "train.similarity_loss": ("sentence_similarity",),
    "decode": SEQ2SEQ_TEXT,
}

# The keys of a corpus of data.corpora that only text_to_text reads.
TEXT_TO_TEXT_CORPUS_KEYS = ("name", "prefix", "kind", "train", "valid", "src_lang", "tgt_lang")


def check_task_keys(task: str, data: dict[str, Any]) -> None:
    """Refuse keys that the run's task never reads (see ``TASK_KEYS``)."""
    corpora = (
        (data.get("data") or {}).get("corpora") if isinstance(data.get("data"), dict) else None
    )
    for i, corpus in enumerate(corpora if isinstance(corpora, list) else []):
        for key in TEXT_TO_TEXT_CORPUS_KEYS:
            if task != "text_to_text" and isinstance(corpus, dict) and key in corpus:
                raise ConfigError(
                    f"data.corpora[{i}].{key}: applies to task text_to_text, not {task}; remove it"
                )
    for name, tasks in TASK_KEYS.items():
        section, _, key = name.partition(".")
        given = data.get(section)
        present = given is not None and (not key or (isinstance(given, dict) and key in given))
        if present and task not in tasks:
            raise ConfigError(
                f"{name}: applies to task {' or '.join(tasks)}, not {task}; remove it"
            )
