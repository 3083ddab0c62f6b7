"""A tiny decoder-only base checkpoint and a LoRA checkpoint on it, for the adapter tests."""

from __future__ import annotations

from pathlib import Path

import torch

from attnkit.adapters import LoRAConfig, install_lora
from attnkit.checkpoints import save_checkpoint
from attnkit.checkpoints.adapters import AdapterInfo, BaseReference, save_lora_checkpoint
from attnkit.data.tokenizers import CharTokenizer
from attnkit.models import DecoderOnlyConfig, build_model

TEXT = "the quick brown fox jumps over the lazy dog " * 4
VOCAB = 31  # char_tokenizer().vocab_size
LORA = LoRAConfig(rank=4, alpha=8, targets=("q", "v", "o", "ffn"))


def char_tokenizer() -> CharTokenizer:
    return CharTokenizer.train([TEXT])


def tiny_lm(seed: int = 0) -> torch.nn.Module:
    """A 2-layer grouped-query SwiGLU decoder over char_tokenizer()'s vocabulary, in eval mode."""
    torch.manual_seed(seed)
    config = DecoderOnlyConfig.from_preset("small", vocab_size=VOCAB, d_model=32, num_heads=4,
                                           num_kv_heads=2, d_ff=64, num_layers=2, dropout=0.0,
                                           activation="swiglu", norm="rmsnorm")  # fmt: skip
    return build_model(config).eval()


def randomize_b(model: torch.nn.Module, seed: int = 1) -> None:
    """Give every adapter a non-zero ``B`` (a trained adapter)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def save_base(directory: Path, seed: int = 0) -> torch.nn.Module:
    model = tiny_lm(seed)
    save_checkpoint(directory, model_state=model.state_dict(), config=model.config.to_dict(),
                    tokenizer_json=char_tokenizer().to_json())  # fmt: skip
    return model


def lora_run(tmp_path: Path) -> tuple[Path, Path, torch.nn.Module]:
    """``(base dir, LoRA checkpoint dir, the adapted model)`` with trained-looking adapters."""
    base = tmp_path / "base"
    model = save_base(base)
    install_lora(model, LORA)
    randomize_b(model)
    out = tmp_path / "lora"
    save_lora_checkpoint(out, model, AdapterInfo(LORA, BaseReference.of(base)),
                         config=model.config.to_dict(),
                         tokenizer_json=char_tokenizer().to_json())  # fmt: skip
    return base, out, model
