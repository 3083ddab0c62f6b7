"""bf16 and int8 on a trained quickstart-size model: they translate as fp32 does.

The stated rates (``AGREEMENT``) are what the README promises for
``--precision``; the measured ones on the full quickstart and on Multi30k
are in docs/lab/results-history.md.
"""

from __future__ import annotations

import copy

import pytest
import torch

from attnkit.checkpoints import load_model
from attnkit.data.synthetic import number_to_english
from attnkit.decoding.text import translate_texts
from attnkit.inference import stepper_for
from attnkit.quantize import model_bytes, quantize_model

# Share of 300 held-out sentences translated exactly as the fp32 reference path does.
AGREEMENT = {"fp32": 1.0, "bf16": 0.95, "int8": 0.95}


@pytest.fixture(scope="module")
def reference(quickstart_run):
    loaded = load_model(quickstart_run.out, "cpu")
    texts = [number_to_english(n) for n in range(1, 1_000_000, 3331)]  # 300, mostly unseen
    out = {}
    for beam in (1, 4):
        out[beam] = translate_texts(loaded.model, loaded.tokenizer, texts, beam=beam,
                                    stepper=stepper_for(loaded.model, "reference"))  # fmt: skip
    return loaded, texts, out


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
@pytest.mark.parametrize("beam", [1, 4])
def test_each_precision_translates_as_fp32_does(reference, precision, beam):
    loaded, texts, ref = reference
    model = quantize_model(copy.deepcopy(loaded.model), precision)
    hyps = translate_texts(model, loaded.tokenizer, texts, beam=beam, stepper=stepper_for(model))
    same = sum(h == r for h, r in zip(hyps, ref[beam], strict=True)) / len(texts)
    assert same >= AGREEMENT[precision], f"{precision} beam {beam}: {same:.1%} identical"


def test_int8_weights_take_at_most_half_the_memory(reference):
    loaded, _, _ = reference
    fp32 = model_bytes(loaded.model)
    assert model_bytes(quantize_model(copy.deepcopy(loaded.model), "int8")) <= 0.5 * fp32
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())  # the copy only
