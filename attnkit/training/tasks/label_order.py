"""The order of a classifier's labels (its output rows), shared by the text and token
classifiers: the data's own order, an earlier checkpoint's when it already knows every
label (its head is kept), or the config's ``model.label_names`` when it lists them."""

from __future__ import annotations

from collections.abc import Sequence

from attnkit.errors import ConfigError


def head_label_names(
    names: Sequence[str], known: Sequence[str], listed: object, source: str, noun: str
) -> tuple[str, ...]:
    """``names`` (the data's labels, as ``noun``: "labels", "tags") in the order to train.

    ``known``: the warm-start checkpoint's labels (empty if none or another kind);
    ``listed``: the config's ``model.label_names`` as given (used when it is a list of
    strings; the model config checks the list itself); ``source``: the training file,
    for the error naming a label the list leaves out.
    """
    order = tuple(names)
    if known and set(order) <= set(known):
        order = tuple(known)  # an earlier classifier of these labels: keep its order and head
    if isinstance(listed, list | tuple) and all(isinstance(n, str) for n in listed):
        # the config fixes the rows' order: train by it, so the checkpoint's names are the
        # labels each row learned (not the data's order renamed)
        unlisted = [n for n in order if n not in listed]
        if unlisted:
            raise ConfigError(f"model.label_names: {source} has {noun} {unlisted} "
                              "that it does not list")  # fmt: skip
        order = tuple(listed)
    return order
