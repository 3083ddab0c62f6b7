"""Writes ``fused_cross_attention/``: a checkpoint in the layout of attnkit before
cross-attention had separate ``q_proj``/``kv_proj`` (one fused ``cross_attn.qkv_proj``).

Run with that attnkit (commit 95db2e4), from the repository root:

    git worktree add /tmp/old 95db2e4
    PYTHONPATH=/tmp/old python tests/models/data/write_fused_cross_checkpoint.py

Besides the checkpoint it stores what that attnkit computed from it
(``expected.safetensors``: teacher-forced logits and greedy outputs), which
``tests/models/test_checkpoint_keys.py`` compares today's code against.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from attnkit.checkpoints import save_checkpoint
from attnkit.data.tokenizers import WordTokenizer
from attnkit.decoding import greedy_search
from attnkit.models import EncoderDecoder, TransformerConfig

HERE = Path(__file__).resolve().parent / "fused_cross_attention"


def main() -> None:
    tokenizer = WordTokenizer.train(["ein Haus am See", "zwei Hunde laufen", "a dog runs"])
    v = tokenizer.vocab_size
    config = TransformerConfig(
        d_model=16, num_heads=4, num_kv_heads=2, d_ff=32, num_encoder_layers=1,
        num_decoder_layers=2, src_vocab_size=v, tgt_vocab_size=v, max_len=32, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = EncoderDecoder(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    state = model.state_dict()
    assert "decoder.layers.0.cross_attn.qkv_proj.weight" in state  # the old layout
    save_checkpoint(HERE, model_state=state, config=config.to_dict(),
                    tokenizer_json=tokenizer.to_json())  # fmt: skip
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, v, (3, 6), generator=g)
    src[2, 4:] = config.pad_id  # one padded source
    tgt = torch.randint(3, v, (3, 5), generator=g)
    tgt[:, 0] = config.bos_id
    with torch.no_grad():
        logits = model(src, tgt).logits
    out = greedy_search(model, src, max_len=8)
    greedy = torch.full((3, 8), -1, dtype=torch.long)
    for row, tokens in enumerate(out.tokens):
        greedy[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    save_file({"src": src, "tgt": tgt, "logits": logits, "greedy": greedy},
              str(HERE / "expected.safetensors"))  # fmt: skip


if __name__ == "__main__":
    main()
