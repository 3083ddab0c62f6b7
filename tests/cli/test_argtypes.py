"""Numbers and devices on the command line are refused while parsing, naming the option."""

from __future__ import annotations

import pytest
import torch

from attnkit.cli.main import main


@pytest.mark.parametrize(
    "argv,words",
    [
        (["quickstart", "--minutes", "nan"], "argument --minutes: must be a finite number"),
        (["quickstart", "--minutes", "1e999"], "argument --minutes: must be a finite number"),
        (["quickstart", "--target", "inf"], "argument --target: must be a finite number"),
        (["quickstart", "--seed", "18446744073709551616"], "argument --seed: a seed must be in"),
        (["translate", "--checkpoint", "x", "--seed", "-1"], "argument --seed: a seed must be"),
        (["translate", "--checkpoint", "x", "--temperature", "nan"], "argument --temperature"),
        (["translate", "--checkpoint", "x", "--beam", "99999999999999999999"], "out of range"),
        (["generate", "--checkpoint", "x", "--top-p", "-inf"], "argument --top-p"),
        (["evaluate", "--checkpoint", "x", "--context", "1e3"], "expected an integer"),
        (["translate", "--checkpoint", "x", "--device", "gpu"], "unknown device 'gpu'"),
        (["translate", "--checkpoint", "x", "--device", "meta"], "not available"),
    ],
)
def test_bad_numbers_and_devices_are_refused_by_option(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and words in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["translate", "--checkpoint", "x", "--device", "cuda"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "CUDA is not available" in err and "--device cpu" in err


def test_help_epilogs_keep_their_line_breaks(capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    out = capsys.readouterr().out
    from attnkit.cli import evaluate

    examples = [line for line in out.splitlines() if line.startswith("  attnkit evaluate")]
    written = [line for line in evaluate.__doc__.splitlines() if line.startswith("  attnkit ")]
    assert len(examples) == len(written) >= 5, out  # one per line, as the epilog writes them
