"""Named presets of every family, as data (a plain dict: preset name -> field overrides).

``base`` and ``big`` are the paper's Table 3 with its 37k shared BPE
vocabulary (WMT 2014 En-De); ``small`` is a CPU-sized model for tests, the
quickstart and small corpora like Multi30k. The language-model presets follow
nanoGPT (``shakespeare_char``), GPT-2 small and BERT-base; their vocabulary is
left to the tokenizer. The RNN presets follow Bahdanau et al. (2015) and
Luong et al. (2015).
"""

from __future__ import annotations

TRANSFORMER_PRESETS: dict[str, dict[str, object]] = {
    "base": {},  # TransformerConfig's defaults are the base model
    "big": {"d_model": 1024, "num_heads": 16, "d_ff": 4096, "dropout": 0.3},
    "small": {
        "d_model": 256,
        "num_heads": 4,
        "d_ff": 1024,
        "num_encoder_layers": 3,
        "num_decoder_layers": 3,
        "max_len": 512,
        "src_vocab_size": 8000,
        "tgt_vocab_size": 8000,
    },
}

# T5 (Raffel et al., 2020) as options of the encoder-decoder: its relative position
# bias (no absolute positions), pre-norm RMSNorm without bias, bias-free projections,
# the unscaled dot product (the 1/sqrt(d_k) goes into the init), unscaled embeddings;
# T5 v1.1's gated-GELU FFN. "t5" is these options alone; "t5_small_cpu" adds a CPU
# size, with one matrix for both embeddings and the output (the original T5's tying,
# hence T5's d_model**-0.5 rescale of the decoder output).
T5_OPTIONS: dict[str, object] = {
    "positions": "t5_relative",
    "relative_buckets": 32,
    "relative_max_distance": 128,
    "norm": "rmsnorm",
    "norm_position": "pre",
    "norm_eps": 1e-6,
    "bias": False,
    "activation": "gated_gelu",
    "attention_score": "dot",
    "scale_embeddings": False,
}
TRANSFORMER_PRESETS["t5"] = dict(T5_OPTIONS)
TRANSFORMER_PRESETS["t5_small_cpu"] = {
    **T5_OPTIONS,
    "d_model": 256,
    "num_heads": 4,
    "d_ff": 640,  # three matrices: ~2/3 of the 1024 a two-matrix FFN would have
    "num_encoder_layers": 3,
    "num_decoder_layers": 3,
    "max_len": 512,
    "src_vocab_size": 8000,
    "tgt_vocab_size": 8000,
    "share_embeddings": "all",
    "scale_output": True,
}

# nanoGPT's config/train_shakespeare_char.py and GPT-2 small (124M). The
# vocabulary is left to the tokenizer: pass vocab_size=tokenizer.vocab_size.
DECODER_ONLY_PRESETS: dict[str, dict[str, object]] = {
    "small": {"d_model": 128, "num_heads": 4, "d_ff": 512, "num_layers": 4, "max_len": 256},
    "shakespeare_char": {
        "d_model": 384,
        "num_heads": 6,
        "d_ff": 1536,
        "num_layers": 6,
        "max_len": 256,
        "dropout": 0.2,
    },
    "gpt2_small": {
        "d_model": 768,
        "num_heads": 12,
        "d_ff": 3072,
        "num_layers": 12,
        "max_len": 1024,
        "vocab_size": 50257,
    },
}

# The Llama family (Touvron et al., 2023): pre-norm RMSNorm blocks, rotary positions,
# SwiGLU, no biases, unscaled embeddings, no dropout. "llama" is these options alone
# (give the shape as overrides, as `attnkit import --from gguf` does from a file's
# llama.* metadata); the named shapes add a model's sizes. SmolLM2 (Allal et al.,
# 2025) is a small Llama with grouped-query attention and tied embeddings; its
# special ids are <|endoftext|> 0, <|im_start|> 1, <|im_end|> 2 (pad, BOS, EOS).
LLAMA_OPTIONS: dict[str, object] = {
    "positions": "rotary",
    "norm": "rmsnorm",
    "norm_position": "pre",
    "activation": "swiglu",
    "bias": False,
    "scale_embeddings": False,
    "dropout": 0.0,
    "attention_dropout": 0.0,
    "norm_eps": 1e-5,
}
LLAMA_SHAPES: dict[str, dict[str, object]] = {
    "smollm2_135m": {
        "d_model": 576,
        "num_heads": 9,
        "num_kv_heads": 3,
        "d_ff": 1536,
        "num_layers": 30,
        "vocab_size": 49152,
        "max_len": 8192,
        "rope_theta": 100000.0,
        "tie_embeddings": True,
    },
    "smollm2_360m": {
        "d_model": 960,
        "num_heads": 15,
        "num_kv_heads": 5,
        "d_ff": 2560,
        "num_layers": 32,
        "vocab_size": 49152,
        "max_len": 8192,
        "rope_theta": 100000.0,
        "tie_embeddings": True,
    },
    "llama2_7b": {
        "d_model": 4096,
        "num_heads": 32,
        "d_ff": 11008,
        "num_layers": 32,
        "vocab_size": 32000,
        "max_len": 4096,
        "rope_theta": 10000.0,
        "tie_embeddings": False,
    },
}
DECODER_ONLY_PRESETS["llama"] = dict(LLAMA_OPTIONS)
for _name, _shape in LLAMA_SHAPES.items():
    DECODER_ONLY_PRESETS[_name] = {**LLAMA_OPTIONS, **_shape}

# BERT-base's shape (Devlin et al., 2019); "small" is CPU-sized.
ENCODER_ONLY_PRESETS: dict[str, dict[str, object]] = {
    "small": {"d_model": 128, "num_heads": 4, "d_ff": 512, "num_layers": 4, "max_len": 256},
    "bert_base": {"d_model": 768, "num_heads": 12, "d_ff": 3072, "num_layers": 12},
}

RNN_PRESETS: dict[str, dict[str, object]] = {
    # CPU-sized: tests, quick experiments, small corpora.
    "small": {
        "cell": "gru",
        "attention": "bahdanau",
        "embed_dim": 64,
        "hidden_size": 128,
        "num_layers": 1,
        "bidirectional": True,
        "dropout": 0.1,
    },
    # RNNsearch's shape (Bahdanau et al., 2015), halved: biGRU encoder, additive attention.
    "bahdanau": {
        "cell": "gru",
        "attention": "bahdanau",
        "embed_dim": 256,
        "hidden_size": 512,
        "num_layers": 1,
        "bidirectional": True,
        "dropout": 0.1,
    },
    # Luong et al. (2015)'s global attention with input feeding, at CPU/GPU-friendly width.
    "luong": {
        "cell": "lstm",
        "attention": "luong_general",
        "embed_dim": 512,
        "hidden_size": 512,
        "num_layers": 2,
        "bidirectional": False,
        "input_feeding": True,
        "dropout": 0.2,
    },
}

# The Vision Transformer: "digits" for scikit-learn's 8x8 digits on a CPU
# (issue 17's recipe), "vit_base_16" the paper's ViT-B/16 shape.
VIT_PRESETS: dict[str, dict[str, object]] = {
    "digits": {
        "image_size": 8,
        "patch_size": 4,
        "channels": 1,
        "num_classes": 10,
        "d_model": 64,
        "num_heads": 4,
        "d_ff": 128,
        "num_layers": 3,
        "dropout": 0.1,
    },
    "vit_base_16": {
        "image_size": 224,
        "patch_size": 16,
        "channels": 3,
        "num_classes": 1000,
        "d_model": 768,
        "num_heads": 12,
        "d_ff": 3072,
        "num_layers": 12,
    },
}
