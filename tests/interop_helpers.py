"""Helpers of the tests in tests/interop and tests/engines (importable: tests/ is on the path).

``bpe_checkpoint`` is a session fixture both folders' conftests import.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def save_random_model(directory: Path, tokenizer, *, seed: int = 0, **overrides) -> Path:
    """A random Transformer checkpoint (every weight perturbed) with ``tokenizer``."""
    from attnkit.checkpoints import save_checkpoint
    from attnkit.models import EncoderDecoder, TransformerConfig

    sizes = dict(d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2, num_decoder_layers=2)
    sizes.update(src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size)
    cfg = TransformerConfig(**{**sizes, "max_len": 64, "dropout": 0.0, **overrides})
    torch.manual_seed(seed)
    model = EncoderDecoder(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    save_checkpoint(directory, model_state=model.state_dict(), config=cfg.to_dict(),
                    tokenizer_json=tokenizer.to_json())  # fmt: skip
    return directory


BPE_TEXT = ["ein Haus am See", "zwei Hunde laufen schnell", "a dog runs fast",
            "the house by the lake", "Kinder spielen im Garten"] * 20  # fmt: skip


def source_limit(n_tokens: int, max_len_b: int = 50) -> int:
    """attnkit's output limit for a source of ``n_tokens`` tokens (EOS added)."""
    return n_tokens + 1 + max_len_b


TEXT = ["the quick brown fox jumps over the lazy dog", "a lazy cat sleeps in the warm sun"]


def byte_level_tokenizer(specials=("<|endoftext|>",), **roles):
    """A small GPT-2 style (byte-level BPE) tokenizer with ``specials`` (ids 0, 1, ...).

    ``roles``: e.g. ``bos_token="<s>"``; default: <|endoftext|> for BOS, EOS and unknown.
    """
    import tokenizers as tk
    from transformers import PreTrainedTokenizerFast

    hf = tk.Tokenizer(tk.models.BPE())
    hf.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=320, special_tokens=list(specials), show_progress=False,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    hf.train_from_iterator(TEXT * 30, trainer)
    eot = "<|endoftext|>"
    roles = {"bos_token": eot, "eos_token": eot, "unk_token": eot, **roles}
    return PreTrainedTokenizerFast(tokenizer_object=hf, **roles)


def import_saved(model, tokenizer, directory: Path) -> Path:
    """Save a transformers ``model`` and ``tokenizer`` to ``directory``; import it beside."""
    from attnkit.cli.main import main

    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    out = directory.parent / "run"
    assert main(["import", "--from", "hf", str(directory), "--out", str(out)]) == 0
    return out


def assert_same_logits(run: Path, hf, tokenizer, texts, **encode) -> None:
    """The imported ``run`` and the transformers ``hf`` model: same ids, logits within 1e-5."""
    from attnkit.checkpoints.loading import load_model

    loaded = load_model(run, "cpu")
    for text in texts:
        ids = torch.tensor([loaded.tokenizer.encode(text)])
        assert ids[0].tolist() == tokenizer(text, **encode).input_ids
        with torch.no_grad():
            diff = (loaded.model(ids).logits - hf(ids).logits).abs().max().item()
        assert diff <= 1e-5, diff


@pytest.fixture(scope="session")
def bpe_checkpoint(tmp_path_factory) -> Path:
    """A random Transformer with a BPE tokenizer (the Multi30k tokenizer kind)."""
    from attnkit.data.tokenizers import BPETokenizer

    tokenizer = BPETokenizer.train(BPE_TEXT, 90, min_frequency=1)
    # A seed whose random model never ranks <pad> first on the texts the tests translate
    # (CT2 has no <pad>; HF Marian never emits it) and answers an empty source with
    # special tokens only (checked when the seed was chosen, after the cross-attention
    # split changed the random draws): the tests compare the exports on such a model.
    return save_random_model(tmp_path_factory.mktemp("bpe") / "ckpt", tokenizer, seed=12)
