"""Data: readers, tokenizers, token-budget batching, collation and the synthetic task.

Importing this package needs only torch and numpy; BPE (``tokenizers``) is
imported when first used.
"""

from attnkit.data.batching import TokenBudgetSampler, filter_by_length
from attnkit.data.collate import TranslationBatch, collate_translation, pad_batch
from attnkit.data.readers import ParallelCorpus, read_lines, read_parallel, read_text, read_tsv
from attnkit.data.synthetic import (
    number_pairs,
    number_splits,
    number_to_english,
    number_to_german,
    sample_numbers,
)
from attnkit.data.tokenizer_kinds import load_tokenizer, tokenizer_from_json
from attnkit.data.tokenizers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    BPETokenizer,
    CharTokenizer,
    Tokenizer,
    WordTokenizer,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "BPETokenizer",
    "CharTokenizer",
    "ParallelCorpus",
    "TokenBudgetSampler",
    "Tokenizer",
    "TranslationBatch",
    "WordTokenizer",
    "collate_translation",
    "filter_by_length",
    "load_tokenizer",
    "number_pairs",
    "number_splits",
    "number_to_english",
    "number_to_german",
    "pad_batch",
    "read_lines",
    "read_parallel",
    "read_text",
    "read_tsv",
    "sample_numbers",
    "tokenizer_from_json",
]
