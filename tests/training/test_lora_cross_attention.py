"""LoRA reaches cross-attention: a fine-tune of an imported Marian model trains the
cross-attention adapters (non-zero B) and `attnkit merge` folds them in.

The Marian model is made here: transformers' ``MarianMTModel`` with a tiny
random config and a word-level tokenizer, saved with ``save_pretrained`` and
imported with ``attnkit import --from hf``. Nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attnkit.adapters import LoRAConfig, install_lora
from attnkit.checkpoints import MODEL_FILE, latest_checkpoint, load_model, load_tensors
from attnkit.cli.main import main
from attnkit.data.synthetic import number_splits

transformers = pytest.importorskip("transformers")
LORA = {"rank": 4, "alpha": 8, "targets": ["q", "k", "v", "o"]}


def _marian(directory: Path, texts: list[str]) -> None:
    """A tiny random MarianMTModel and a word-level tokenizer over ``texts``, saved."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = sorted({w for t in texts for w in t.split()})
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<s>", "</s>", "<unk>", *words])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )
    config = transformers.MarianConfig(
        vocab_size=len(vocab), d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=1, forced_eos_token_id=2, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.MarianMTModel(config).save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


def _data(root: Path) -> list[str]:
    splits = number_splits(120, 8, 8, low=1, high=999, seed=0)
    texts = []
    for split, pairs in splits.items():
        for side, lines in (("en", [s for s, _ in pairs]), ("de", [t for _, t in pairs])):
            (root / f"{split}.{side}").write_text("".join(x + "\n" for x in lines), "utf-8")
            texts += lines
    return texts


@pytest.mark.slow  # an import, a 4-step run and a merge through the CLI: ~9 s of CPU
def test_lora_on_an_imported_marian_trains_and_merges_cross_attention(tmp_path):
    texts = _data(tmp_path)
    _marian(tmp_path / "hf", texts)
    base = tmp_path / "base"
    assert main(["import", "--from", "hf", str(tmp_path / "hf"), "--out", str(base)]) == 0
    config = {
        "task": "translation",
        "data": {"dir": str(tmp_path), "src_lang": "en", "tgt_lang": "de", "train": "train",
                 "valid": "valid", "max_len": 32},
        "train": {"lora": LORA, "max_steps": 4, "max_tokens": 400, "lr": 1e-2,
                  "schedule": "constant", "warmup_steps": 0, "log_every": 1, "eval_every": 4,
                  "save_every": 4, "valid_bleu_sentences": 0, "seed": 1},
    }  # fmt: skip
    path = tmp_path / "lora.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")
    run = tmp_path / "run"
    args = ["train", "--config", str(path), "--init", str(base), "--out", str(run)]
    assert main([*args, "--no-progress", "--device", "cpu"]) == 0

    saved = load_tensors(latest_checkpoint(run) / MODEL_FILE)
    cross_b = {k: v for k, v in saved.items() if ".cross_attn." in k and ".lora_B." in k}
    # q_proj (q), kv_proj (k, v), out_proj (o) of the one decoder layer
    assert {k.split(".cross_attn.")[1] for k in cross_b} == {
        "q_proj.lora_B.q", "kv_proj.lora_B.k", "kv_proj.lora_B.v", "out_proj.lora_B.o"
    }  # fmt: skip
    assert all(v.abs().max() > 0 for v in cross_b.values())  # trained away from B = 0

    merged = tmp_path / "merged"
    assert main(["merge", "--checkpoint", str(run), "--out", str(merged)]) == 0
    adapted = load_model(base, "cpu").model
    install_lora(adapted, LoRAConfig(**LORA))
    adapted.load_state_dict(saved, strict=False)
    plain = load_model(base, "cpu").model
    src, tgt = torch.randint(3, 20, (2, 7)), torch.randint(3, 20, (2, 5))
    with torch.no_grad():
        expected = adapted.eval()(src, tgt).logits
        got = load_model(merged, "cpu").model(src, tgt).logits
        before = plain.eval()(src, tgt).logits
    assert (got - expected).abs().max() < 1e-5
    assert (got - before).abs().max() > 1e-4  # the merge changed the model
    merged_state = load_model(merged, "cpu").model.state_dict()
    base_state = plain.state_dict()
    for name in ("q_proj", "kv_proj", "out_proj"):  # the cross-attention weights moved
        key = f"decoder.layers.0.cross_attn.{name}.weight"
        assert not torch.equal(merged_state[key], base_state[key]), key
