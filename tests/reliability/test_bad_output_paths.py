"""Bad-input catalogue (see ``test_bad_input_catalogue.py``): output paths.

The output-path policy (``attnkit.output_paths``): never a device, a FIFO, a link's odd
target, one of the inputs, a directory holding one, or a path inside one.
"""

from __future__ import annotations

import pytest
from catalogue_helpers import Case, check

CASES = [
    # -- output paths (attnkit.output_paths): never a device, FIFO, link's odd target or input --
    Case("output/hyp-out-is-the-source",
         lambda c: c.evaluate("--hyp-out", str(c.tmp / "test.en")), 2,
         "--hyp-out", "is also an input of this command"),
    Case("output/hyp-out-is-a-device",
         lambda c: c.evaluate("--hyp-out", str(c.special("device"))), 2,
         "device", "not a regular file"),
    Case("output/hyp-out-is-a-fifo",
         lambda c: c.evaluate("--hyp-out", str(c.special("fifo"))), 2,
         "fifo", "a FIFO (named pipe), not a regular file"),
    Case("output/hyp-out-is-a-dangling-link",
         lambda c: c.evaluate("--hyp-out", str(c.special("dangling"))), 2,
         "dangling", "does not exist"),
    Case("output/hyp-out-inside-the-checkpoint",
         lambda c: c.evaluate("--hyp-out", str(c.trained.checkpoint / "model.safetensors")), 2,
         "model.safetensors", "lies inside the input"),
    Case("output/attention-out-is-a-directory",
         lambda c: ["attention", "--checkpoint", str(c.trained.checkpoint), "--text", "one",
                    "--out", str(c.special("dir.png"))], 2,
         "dir.png", "is a directory, not a regular file"),
    Case("output/explore-out-under-a-file",
         lambda c: ["explore", "--checkpoint", str(c.trained.checkpoint), "--text", "one",
                    "--out", str(c.special("file") / "page.html")], 2,
         "page.html", "is a file, not a directory"),
    Case("output/train-out-is-a-device",
         lambda c: [*c.train()[:4], str(c.special("device"))], 2,
         "device", "character device, not a directory"),
    Case("output/train-overwrite-of-the-data",
         lambda c: [*c.train()[:4], str(c.tmp / "data"), "--overwrite"], 2,
         "--out", "is also an input of this command"),
    Case("output/train-overwrite-of-other-files",
         lambda c: [*c.train()[:4], str(c.special("dir")), "--overwrite",
                    *c.touch("dir/notes.txt")], 2,
         "notes.txt", "--overwrite replaces only a run"),
    Case("output/average-out-holds-its-input",
         lambda c: ["average", "--run", str(c.run_copy()), "--out", str(c.tmp / "run"),
                    "--overwrite"], 2,
         "--out", "which replacing it would delete"),
    Case("output/import-out-is-its-source",
         lambda c: ["import", "--from", "hf", str(c.trained.checkpoint), "--out",
                    str(c.trained.checkpoint), "--overwrite"], 2,
         "--out", "is also an input of this command"),
    # -- nor inside an input checkpoint (export --out CKPT/hf wrote into the checkpoint) --
    *[Case(f"output/export-{target}-inside-the-checkpoint",
           lambda c, target=target: ["export", "--checkpoint", str(c.checkpoint()), "--to",
                                     target, "--out", str(c.tmp / "checkpoint" / target)], 2,
           "--out", "lies inside the input")
      for target in ("hf", "onnx", "ctranslate2")],
    Case("output/export-gguf-inside-the-checkpoint",
         lambda c: ["export", "--checkpoint", str(c.checkpoint()), "--to", "gguf",
                    "--out", str(c.tmp / "checkpoint" / "model.gguf")], 2,
         "--out", "lies inside the input"),
    Case("output/export-inside-the-checkpoint-a-run-resolves-to",
         lambda c: ["export", "--checkpoint", str(run := c.run_copy()), "--to", "hf", "--out",
                    str(run / "checkpoints" / c.trained.checkpoint.name / "hf")], 2,
         "--out", "lies inside the input"),
    Case("output/average-out-inside-a-checkpoint",
         lambda c: ["average", "--checkpoints", str(c.checkpoint()),
                    "--out", str(c.tmp / "checkpoint" / "averaged")], 2,
         "--out", "lies inside the input"),
    Case("output/train-overwrite-inside-the-init-checkpoint",
         lambda c: [*c.train()[:4], str((init := c.checkpoint()) / "finetuned"),
                    "--init", str(init), "--overwrite"], 2,
         "--out", "lies inside the input"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_gives_one_line_and_changes_nothing(case, trained, lm_checkpoint, tmp_path):
    check(case, trained, lm_checkpoint, tmp_path)
