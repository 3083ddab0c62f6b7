"""Entity tag schemes: IOB1, IOB2 (BIO) and BIOES, converted through BIO.

A tag is ``O`` or ``P-TYPE``, a prefix and an entity type (``B-PER``):

* IOB1 (CoNLL-2003's own files): an entity's words are ``I-TYPE``; ``B-TYPE``
  only starts an entity that directly follows another of the same type.
* IOB2, also called BIO: every entity starts with ``B-TYPE``, continues with ``I-TYPE``.
* BIOES: ``S-TYPE`` is a one-word entity; longer ones are ``B- I- ... E-``.

attnkit keeps tags as BIO internally (the model's labels, its checkpoint's
``label_names``): ``to_bio`` converts from any scheme, ``from_bio`` back. An
``I-TYPE`` that does not continue an entity of its type starts one, as
conlleval and seqeval read it, so every sequence converts, and the entity spans
(``entities``) are the same under every scheme.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Scheme = Literal["iob1", "bio", "bioes"]
SCHEMES: tuple[str, ...] = ("iob1", "iob2", "bio", "bioes")  # iob2 is bio
PREFIXES: dict[str, str] = {"iob1": "BI", "bio": "BI", "bioes": "BIES"}


@dataclass(frozen=True)
class Entity:
    """An entity: its ``type`` and the words ``start`` to ``end`` (exclusive)."""

    type: str
    start: int
    end: int


def canonical(scheme: str) -> Scheme:
    """``iob2`` is ``bio``; anything else not in ``SCHEMES`` is a ``ValueError``."""
    name = scheme.lower()
    if name == "iob2":
        return "bio"
    if name not in ("iob1", "bio", "bioes"):
        raise ValueError(f"unknown tag scheme {scheme!r} (expected iob1, iob2/bio or bioes)")
    return name  # type: ignore[return-value]


def split_tag(tag: str) -> tuple[str, str]:
    """``("B", "PER")`` for ``"B-PER"``, ``("O", "")`` for ``"O"``; ``ValueError`` otherwise."""
    if tag == "O":
        return "O", ""
    prefix, dash, kind = tag.partition("-")
    if not dash or len(prefix) != 1 or prefix not in "BIES" or not kind:
        raise ValueError(f"tag {tag!r} is neither O nor PREFIX-TYPE (B-, I-, E- or S-)")
    return prefix, kind


def detect_scheme(sequences: Sequence[Sequence[str]]) -> Scheme:
    """The scheme of tagged sentences: ``bioes`` if any ``E-``/``S-`` tag occurs, ``iob1``
    if an ``I-`` tag starts an entity somewhere (after ``O``, another type, or at the start),
    else ``bio``. (Data with neither reads the same under IOB1 and BIO.)"""
    iob1 = False
    for tags in sequences:
        previous = "O"
        for tag in tags:
            prefix, kind = split_tag(tag)
            if prefix in "ES":
                return "bioes"
            if prefix == "I" and (previous == "O" or split_tag(previous)[1] != kind):
                iob1 = True
            previous = tag
    return "iob1" if iob1 else "bio"


def to_bio(tags: Sequence[str], scheme: str) -> list[str]:
    """``tags`` in ``scheme`` as BIO (see the module doc); ``ValueError`` for a tag the
    scheme does not have (``E-PER`` in IOB1)."""
    name = canonical(scheme)
    out: list[str] = []
    inside = ""  # the type of the entity the previous word is in ("" after O or E-/S-)
    for tag in tags:
        prefix, kind = split_tag(tag)
        if prefix not in "O" + PREFIXES[name]:
            raise ValueError(f"tag {tag!r} is not a {name.upper()} tag")
        if prefix == "O":
            out.append("O")
        elif prefix in "BS" or kind != inside:
            out.append(f"B-{kind}")
        else:  # I- or E- continuing the entity
            out.append(f"I-{kind}")
        inside = kind if prefix in "BI" else ""
    return out


def entities(tags: Sequence[str]) -> list[Entity]:
    """The entities of a BIO sequence (a stray ``I-`` starts one, as in ``to_bio``)."""
    found: list[Entity] = []
    start, kind = -1, ""
    for i, tag in enumerate([*to_bio(tags, "bio"), "O"]):
        prefix, this = split_tag(tag)
        if kind and (prefix != "I" or this != kind):
            found.append(Entity(kind, start, i))
            kind = ""
        if prefix == "B":
            start, kind = i, this
    return found


def from_bio(tags: Sequence[str], scheme: str) -> list[str]:
    """BIO ``tags`` written in ``scheme`` (the same entities)."""
    name = canonical(scheme)
    out = ["O"] * len(tags)
    previous_end, previous_type = -1, ""
    for entity in entities(tags):
        n = entity.end - entity.start
        for i in range(entity.start, entity.end):
            out[i] = f"I-{entity.type}"
        if name == "bio":
            out[entity.start] = f"B-{entity.type}"
        elif name == "iob1":
            if previous_end == entity.start and previous_type == entity.type:
                out[entity.start] = f"B-{entity.type}"
        elif n == 1:
            out[entity.start] = f"S-{entity.type}"
        else:
            out[entity.start] = f"B-{entity.type}"
            out[entity.end - 1] = f"E-{entity.type}"
        previous_end, previous_type = entity.end, entity.type
    return out


def bio_label_names(tags: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """The BIO labels of a model tagging ``tags``: ``O``, then ``B-``/``I-`` of every entity
    type seen, types sorted (both prefixes for each type, whichever the data happens to hold)."""
    kinds = sorted({split_tag(t)[1] for seq in tags for t in seq} - {""})
    return ("O", *(f"{p}-{k}" for k in kinds for p in "BI"))
