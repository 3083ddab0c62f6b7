"""Small inputs for the CLI tests: a tiny random translation checkpoint, a tiny run config."""

from __future__ import annotations

from pathlib import Path

from attnkit.checkpoints import save_checkpoint
from attnkit.data.synthetic import number_splits
from attnkit.data.tokenizers import CharTokenizer
from attnkit.models import EncoderDecoder, TransformerConfig

CONFIG = """
task: translation
data: {{dir: {dir}, src_lang: en, tgt_lang: de, train: train, valid: null, max_len: 96}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 16, num_heads: 2, d_ff: 32,
        num_encoder_layers: 1, num_decoder_layers: 1, max_len: 128}}
train: {{max_steps: {max_steps}, max_tokens: 400, warmup_steps: 2, log_every: 1000,
        eval_every: 100000, save_every: {save_every}, keep_last: 2, valid_bleu_sentences: 0}}
"""


def tiny_checkpoint(directory: Path) -> Path:
    """A random 1+1-layer encoder-decoder with a character tokenizer, saved at ``directory``."""
    tok = CharTokenizer.train(["one two three"])
    config = TransformerConfig(d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                               num_decoder_layers=1, src_vocab_size=tok.vocab_size,
                               tgt_vocab_size=tok.vocab_size, max_len=32)  # fmt: skip
    return save_checkpoint(directory, model_state=EncoderDecoder(config).state_dict(),
                           config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip


def tiny_run_config(directory: Path, *, max_steps: int = 4, save_every: int = 2) -> Path:
    """40 number pairs (``train.en``/``train.de``) and ``tiny.yaml`` training on them."""
    pairs = number_splits(40, 0, 0, low=1, high=999, seed=0)["train"]
    (directory / "train.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (directory / "train.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    path = directory / "tiny.yaml"
    text = CONFIG.format(dir=directory, max_steps=max_steps, save_every=save_every)
    path.write_text(text, encoding="utf-8")
    return path
