"""`attnkit train --init` names the modules the checkpoint did not supply, not their parents."""

from __future__ import annotations

from types import SimpleNamespace

from torch import nn

from attnkit.cli.train import _fresh_note


def test_the_note_names_the_new_output_rows_not_the_whole_head():
    model = nn.Module()
    model.classifier = nn.Module()
    model.classifier.pooler = nn.Linear(4, 4)  # the import's pretrained pooler
    model.classifier.classifier = nn.Linear(4, 2)  # new labels: fresh rows
    model.encoder = nn.Linear(4, 4)
    state = {
        k: v for k, v in model.state_dict().items() if not k.startswith("classifier.classifier")
    }
    assert (
        _fresh_note(model, SimpleNamespace(state=state))
        == "; freshly initialised: classifier.classifier"
    )
    state["encoder.weight"] = state["encoder.weight"][:2]  # another shape: fresh too
    note = _fresh_note(model, SimpleNamespace(state=state))
    assert note == "; freshly initialised: classifier.classifier, encoder"
    assert _fresh_note(model, SimpleNamespace(state=model.state_dict())) == ""
