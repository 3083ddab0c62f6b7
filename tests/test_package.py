"""The package face: the public API imports from ``attnkit`` itself, lazily."""

from __future__ import annotations

import subprocess
import sys

import attnkit


def test_the_public_api_imports_from_the_package():
    from attnkit import (  # noqa: F401
        DecoderOnlyLM,
        EncoderDecoder,
        EncoderOnlyModel,
        RNNSeq2Seq,
        TransformerConfig,
        beam_search,
        greedy_search,
        load_model,
        sample,
    )

    for name in attnkit.__all__:
        assert getattr(attnkit, name) is not None, name
    assert sorted(dir(attnkit)) == sorted(attnkit.__all__)


def test_importing_the_package_does_not_import_torch():
    # `attnkit --help` and the CLI's argument errors stay fast.
    code = "import sys, attnkit; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="No attnkit attribute Nope"):
        attnkit.Nope  # noqa: B018
