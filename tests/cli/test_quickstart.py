"""The quickstart learns its task: a reduced budget, a bar that can fail."""

import json


def test_quickstart_learns_number_translation(quickstart_run):
    out = quickstart_run.out
    metrics = json.loads((out / "metrics.json").read_text())
    # The full quickstart reaches >= 0.97 (docs/lab/results-history.md); a third of its budget
    # must already get most held-out numbers exactly right.
    assert metrics["exact_match"] >= 0.6, metrics
    assert metrics["bleu"] >= 50, metrics
    assert (out / "attention.png").read_bytes()[:4] == b"\x89PNG"
    assert "exact match" in quickstart_run.stdout
    assert (out / "quickstart.json").is_file()
