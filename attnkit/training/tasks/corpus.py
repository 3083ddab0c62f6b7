"""What the text tasks read, as the run config says: inputs, tokenizer, and how data is loaded.

``data.loading`` picks the path (the model and trainer never know which):

* ``prepared`` (default): ``attnkit.data.prepared`` encodes the training
  data once into memory-mapped token ids in the cache (``data.cache_dir``)
  and every later run, resume or ``attnkit prepare`` reuses it;
* ``memory``: read and encoded into memory on every run (nothing written);
* ``streaming`` (translation): ``attnkit.data.streaming`` reads and encodes
  on the fly, ``data.shuffle_buffer`` pairs at a time, mixing ``data.corpora``
  by weight.

The tokenizer is the resumed run's own, else the file ``tokenizer.path``
names, else one trained on a bounded sample of the training data
(``attnkit.data.vocabulary``; cached with the prepared data).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnkit.data.cache import Log, default_root
from attnkit.data.formats import Input, iter_text_pieces, pair_inputs, read_pairs, text_inputs
from attnkit.data.lm import LMCorpus, encode_text, split_ids
from attnkit.data.pair_batches import PairBatches, encode_pairs
from attnkit.data.prepared import (
    pair_tokenizer,
    prepare_pairs,
    prepare_text,
    text_tokenizer,
    train_on_pairs,
    train_on_text,
)
from attnkit.data.tokenizers import Tokenizer
from attnkit.data.vocabulary import load_tokenizer_file
from attnkit.errors import ConfigError
from attnkit.training.runconfig import LM_TASKS, RunConfig


def cache_root(run: RunConfig) -> Path:
    """Where prepared data goes: ``data.cache_dir``, or the default cache."""
    return Path(run.data.cache_dir) if run.data.cache_dir else default_root()


def _given_tokenizer(run: RunConfig, tokenizer: Tokenizer | None) -> Tokenizer | None:
    """The resumed run's tokenizer, else the one ``tokenizer.path`` names, else None."""
    if tokenizer is not None:
        return tokenizer
    if run.tokenizer.path is None:
        return None
    return load_tokenizer_file(Path(run.data.dir) / run.tokenizer.path)


def training_inputs(run: RunConfig) -> list[list[Input]]:
    """The training split's inputs, one list per corpus (``data.corpora``, else ``data.dir``)."""
    data = run.data
    dirs = [c.dir for c in data.corpora] if data.corpora else [data.dir]
    return [pair_inputs(d, data.train, data.src_lang, data.tgt_lang) for d in dirs]


def translation_data(
    run: RunConfig, tokenizer: Tokenizer | None = None, *, log: Log | None = None
) -> dict[str, Any]:
    """``TranslationTask``'s arguments: ``tokenizer``, ``train_pairs``, ``valid_pairs``,
    ``dropped_empty``."""
    data = run.data
    valid = None
    if data.valid:
        valid_inputs = pair_inputs(data.dir, data.valid, data.src_lang, data.tgt_lang)
        valid = list(read_pairs(valid_inputs, skip_empty=data.skip_empty))
    corpora = training_inputs(run)
    every_input = [i for inputs in corpora for i in inputs]
    weights = [c.weight for c in data.corpora] if data.corpora else [1.0]
    tokenizer = _given_tokenizer(run, tokenizer)
    if data.loading == "streaming":
        from attnkit.data.streaming import PairStream

        tokenizer = tokenizer or pair_tokenizer(
            every_input, run.tokenizer, skip_empty=data.skip_empty, root=cache_root(run), log=log
        )
        stream = PairStream(
            corpora, weights, tokenizer, max_len=data.max_len, skip_empty=data.skip_empty,
            buffer=data.shuffle_buffer, seed=run.train.seed,
        )  # fmt: skip
        return {"tokenizer": tokenizer, "train_pairs": stream, "valid_pairs": valid}
    if data.loading == "memory":
        parts = [read_pairs(inputs, skip_empty=data.skip_empty) for inputs in corpora]
        every = [p for part in parts for p in part.pairs]
        tokenizer = tokenizer or train_on_pairs([every], run.tokenizer)[0]
        dropped = sum(part.dropped_empty for part in parts)
        train: object = parts[0].pairs
        if len(parts) > 1:
            encoded = [encode_pairs(part.pairs, tokenizer) for part in parts]
            train = PairBatches(encoded, max_len=data.max_len, seed=run.train.seed,
                                weights=weights)  # fmt: skip
        return {"tokenizer": tokenizer, "train_pairs": train, "valid_pairs": valid,
                "dropped_empty": dropped}  # fmt: skip
    root = cache_root(run)
    tokenizer = tokenizer or pair_tokenizer(
        every_input, run.tokenizer, skip_empty=data.skip_empty, root=root, log=log
    )
    prepared = [
        prepare_pairs(inputs, tokenizer, skip_empty=data.skip_empty, root=root, log=log)
        for inputs in corpora
    ]
    train = prepared[0].pairs
    if len(prepared) > 1:
        train = PairBatches([p.pairs for p in prepared], max_len=data.max_len,
                            seed=run.train.seed, weights=weights)  # fmt: skip
    return {"tokenizer": tokenizer, "train_pairs": train, "valid_pairs": valid,
            "dropped_empty": sum(p.dropped_empty for p in prepared)}  # fmt: skip


def lm_corpus(
    run: RunConfig, tokenizer: Tokenizer | None = None, *, log: Log | None = None
) -> tuple[LMCorpus, Callable[[], None] | None]:
    """The LM tasks' corpus (split 90/10 by default) and, when prepared, the callable
    that hands back the pages of its memory map."""
    data = run.data
    if data.text is None:
        raise ConfigError(
            f"data.text: the {run.task} task reads one text file; "
            "set data.text (a path relative to data.dir)"
        )
    if data.loading == "streaming":
        raise ConfigError(
            "data.loading: streaming applies to translation; an LM corpus is one stream of "
            "ids, prepared once (data.loading: prepared)"
        )
    inputs = text_inputs(data.dir, data.text)
    tokenizer = _given_tokenizer(run, tokenizer)
    fraction = data.held_out_fraction(run.task)
    if data.loading == "memory":
        text = "".join(iter_text_pieces(inputs))
        tokenizer = tokenizer or train_on_text(inputs, run.tokenizer)[0]
        train, valid = split_ids(encode_text(text, tokenizer), fraction)
        return LMCorpus(train, valid, tokenizer), None
    root = cache_root(run)
    tokenizer = tokenizer or text_tokenizer(inputs, run.tokenizer, root=root, log=log)
    prepared = prepare_text(inputs, tokenizer, root=root, log=log)
    train, valid = split_ids(prepared.ids, fraction)
    return LMCorpus(train, valid, tokenizer), prepared.release


def prepare_run_data(run: RunConfig, *, log: Log | None = None) -> dict[str, object]:
    """What ``attnkit prepare`` does: the training data of ``run`` prepared (or found
    prepared) in the cache, as ``attnkit train`` will want it; a summary."""
    from attnkit.training.tasks.dataset_source import with_dataset

    data, root = run.data, cache_root(run)
    if data.loading == "memory":
        raise ConfigError(
            "data.loading: memory encodes the data on every run, so there is nothing to "
            "prepare; use data.loading: prepared (the default) or streaming"
        )
    summary: dict[str, object] = {"task": run.task, "cache": str(root), "loading": data.loading}
    run = with_dataset(run, log=log)  # data.hf_dataset: exported once into the cache
    data = run.data
    tokenizer = _given_tokenizer(run, None)
    if run.task == "translation":
        corpora = training_inputs(run)
        every = [i for inputs in corpora for i in inputs]
        tokenizer = tokenizer or pair_tokenizer(
            every, run.tokenizer, skip_empty=data.skip_empty, root=root, log=log
        )
        summary["vocab_size"] = tokenizer.vocab_size
        if data.loading == "streaming":
            return summary  # streaming encodes as it reads: only the tokenizer is kept
        prepared = [
            prepare_pairs(inputs, tokenizer, skip_empty=data.skip_empty, root=root, log=log)
            for inputs in corpora
        ]
        arrays = [a for p in prepared for a in (p.pairs.src, p.pairs.tgt)]
        return {**summary, "data": [str(p.directory) for p in prepared],
                "pairs": sum(len(p.pairs) for p in prepared),
                "tokens": sum(a.num_tokens for a in arrays), "dtype": arrays[0].ids.dtype.name,
                "dropped_empty": sum(p.dropped_empty for p in prepared)}  # fmt: skip
    if run.task not in LM_TASKS:
        raise ConfigError(f"task: {run.task} reads no text; there is nothing to prepare")
    corpus, _ = lm_corpus(run, tokenizer, log=log)
    return {**summary, "vocab_size": corpus.tokenizer.vocab_size,
            "tokens": len(corpus.train) + len(corpus.valid)}  # fmt: skip
