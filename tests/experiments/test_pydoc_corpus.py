"""The NSP corpus of Python's reference topics: documents of sentences for sentence_pairs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from attnkit.data.sentence_pairs import split_documents

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "pydoc_corpus.py"


def _module():
    spec = importlib.util.spec_from_file_location("pydoc_corpus", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_topic_becomes_sentences_with_code_blocks_whole_and_underlines_dropped():
    topic = (
        'The "for" statement\n'
        "*******************\n"
        "\n"
        "The loop runs once per item.  It stops when the\n"
        'iterator is exhausted. "else" runs after it (see below)!\n'
        "\n"
        '   for_stmt ::= "for" target_list "in"\n'
        '                ["else" ":" suite]\n'
        "\n"
        "Is it done? Yes, e.g. when nothing is left.\n"
    )
    assert _module().sentences(topic) == [
        'The "for" statement',
        "The loop runs once per item.",
        "It stops when the iterator is exhausted.",
        '"else" runs after it (see below)!',
        'for_stmt ::= "for" target_list "in" ["else" ":" suite]',
        "Is it done?",
        "Yes, e.g. when nothing is left.",
    ]


def test_the_file_is_one_topic_a_document_in_sorted_order(tmp_path):
    from pydoc_data.topics import topics

    assert _module().main([str(tmp_path)]) == 0
    documents = split_documents((tmp_path / "input.txt").read_text(encoding="utf-8"))
    names = [name for name in sorted(topics) if len(_module().sentences(topics[name])) >= 2]
    assert len(documents) == len(names) > 50
    assert documents[0] == _module().sentences(topics[names[0]])
    assert all(line.strip() for doc in documents for line in doc)
