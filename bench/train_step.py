"""Time one training step of attnkit and its peers on the same batch, in one run.

A step is: forward, label-smoothed cross-entropy (eps 0.1, padding ignored),
backward, AdamW step, zero_grad. Models (same sizes, tied embeddings,
dropout 0.1, random init):

* ``attnkit``  -- ``attnkit.models.EncoderDecoder`` and its output projection;
* ``torch_nn`` -- ``torch.nn.Transformer`` (batch-first, post-LN) wrapped the way
  a user writes it: scaled embeddings, sinusoids, tied output projection,
  causal and padding masks;
* ``hf``       -- ``transformers.MarianMTModel`` (sdpa attention), loss from its
  logits with the same criterion (not its internal loss);
* ``torch_nn_paper`` (on request) -- ``torch_nn`` without the dropout that
  ``nn.Transformer`` also applies to attention weights and inside the FFN.

Precision: bf16 autocast on CUDA, fp32 on CPU. Prints a Markdown table ready
for docs/lab/results-history.md; ``--json`` also writes the figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

# common also puts the repo on sys.path, so this runs from a checkout without installing.
from common import PAD, environment, format_table, load_average, make_batch, median, round_robin
from torch import Tensor, nn

from attnkit.models import EncoderDecoder, TransformerConfig

# name -> (attnkit preset, batch, source length, target length, vocabulary)
SHAPES = {
    "base": ("base", 200, 64, 64, 32000),  # the paper's base model; for a GPU
    "small": ("small", 16, 32, 32, 8000),  # attnkit's CPU preset; ~0.3 s/step on 2 cores
}
MODELS = ("attnkit", "torch_nn", "hf")
EXTRA = ("torch_nn_paper",)  # torch_nn with dropout only where the paper (and attnkit) puts it


class TorchNNSeq2Seq(nn.Module):
    """``nn.Transformer`` with the embeddings, positions and output layer around it."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        d = c.d_model
        self.embed = nn.Embedding(c.src_vocab_size, d)
        nn.init.normal_(self.embed.weight, std=d**-0.5)
        pos = torch.arange(c.max_len)[:, None]
        inv_freq = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(c.max_len, d)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * inv_freq), torch.cos(pos * inv_freq)
        self.register_buffer("pe", pe, persistent=False)
        self.dropout = nn.Dropout(c.dropout)
        self.transformer = nn.Transformer(
            d, c.num_heads, c.num_encoder_layers, c.num_decoder_layers, c.d_ff, c.dropout,
            activation=c.activation, batch_first=True, norm_first=False,
        )  # fmt: skip
        self.scale = math.sqrt(d)

    def _embed(self, ids: Tensor) -> Tensor:
        return self.dropout(self.embed(ids) * self.scale + self.pe[: ids.size(1)])

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        t = tgt.size(1)
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).triu(1)  # True = masked
        hidden = self.transformer(
            self._embed(src), self._embed(tgt),
            tgt_mask=causal, tgt_is_causal=True,
            src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt == PAD,
            memory_key_padding_mask=src == PAD,
        )  # fmt: skip
        return F.linear(hidden, self.embed.weight)  # tied output projection


def build(name: str, c: TransformerConfig) -> tuple[nn.Module, Callable[..., Tensor]]:
    """The model and ``forward(src, tgt) -> logits (B, T, V)``."""
    if name == "attnkit":
        model = EncoderDecoder(c)
        return model, lambda src, tgt: model(src, tgt).logits
    if name.startswith("torch_nn"):
        model = TorchNNSeq2Seq(c)
        if name == "torch_nn_paper":  # no dropout on attention weights or inside the FFN
            for layer in [*model.transformer.encoder.layers, *model.transformer.decoder.layers]:
                layer.dropout = nn.Identity()
                for attn in (layer.self_attn, getattr(layer, "multihead_attn", layer.self_attn)):
                    attn.dropout = 0.0
        return model, model
    if name == "hf":
        from transformers import MarianMTModel

        from attnkit.interop.hf.marian import hf_marian_config

        # The config that to_hf_marian would use (same sizes, ids, tying); random init.
        model = MarianMTModel(hf_marian_config(c, attn_implementation="sdpa"))

        def forward(src: Tensor, tgt: Tensor) -> Tensor:
            return model(
                input_ids=src, attention_mask=src != PAD, decoder_input_ids=tgt,
                decoder_attention_mask=tgt != PAD, use_cache=False,
            ).logits  # fmt: skip

        return model, forward
    raise AssertionError(name)


def prepare(name: str, c: TransformerConfig, batch: dict[str, Tensor], args, device) -> dict:
    """Build ``name``, run its warmup steps; returns its step function and memory figures."""
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated(device)  # the other models' weights and state
        torch.cuda.reset_peak_memory_stats(device)
    model, forward = build(name, c)
    model.to(device).train()
    if args.compile:
        forward = torch.compile(forward)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    src, tgt, labels = batch["src"], batch["tgt"], batch["labels"]
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda)

    def step() -> None:
        with amp:
            logits = forward(src, tgt).flatten(0, 1).float()
            loss = F.cross_entropy(logits, labels.flatten(), ignore_index=PAD, label_smoothing=0.1)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    return {
        "model": name,
        "step": step,
        "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        # This model's own footprint: weights, grads, AdamW state and the step's activations.
        "peak_mem_mib": (torch.cuda.max_memory_allocated(device) - base) / 2**20 if cuda else None,
    }


def run(models: list[str], c: TransformerConfig, batch: dict[str, Tensor], args, device) -> list:
    """Warm each model up, then time them round-robin (one step of each per round).

    Interleaving spreads any drift or load from other processes over all models
    alike, instead of penalising whichever model happened to run during it.
    """
    prepared = [prepare(m, c, batch, args, device) for m in models]
    times = round_robin({p["model"]: p["step"] for p in prepared}, args.steps, device)
    tokens = int((batch["labels"] != PAD).sum())
    results = []
    for p in prepared:
        ts = times[p["model"]]
        results.append({
            "model": p["model"],
            "params": p["params"],
            "step_ms": 1000 * median(ts),
            "step_ms_min": 1000 * min(ts),
            "step_ms_max": 1000 * max(ts),
            "tgt_tokens_per_s": tokens / median(ts),
            "peak_mem_mib": p["peak_mem_mib"],
            "step_ms_all": [1000 * t for t in ts],
        })  # fmt: skip
    return results


def parse_args() -> argparse.Namespace:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    p.add_argument(
        "--shape",
        choices=SHAPES,
        help="base: the paper's base model, batch 200 x 64 + 64 tokens, vocab 32000 (GPU); "
        "small: attnkit's 'small' preset, batch 16 x 32 + 32, vocab 8000 (CPU). "
        "Default: base on CUDA, small on CPU.",
    )
    p.add_argument("--batch", type=int, help="override the shape's batch size (rows)")
    choices = ", ".join(MODELS + EXTRA)
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated, from {choices} (default: %(default)s)")  # fmt: skip
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per model (default 3)")
    p.add_argument(
        "--steps", type=int, default=10, help="timed rounds of one step per model (default 10)"
    )
    p.add_argument("--device", help="cuda, cuda:1, cpu, ... (default: cuda if available)")
    p.add_argument("--compile", action="store_true", help="torch.compile each model's forward")
    p.add_argument("--json", metavar="PATH", help="also write environment and figures as JSON")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    shape = args.shape or ("base" if device.type == "cuda" else "small")
    preset, b, s, t, vocab = SHAPES[shape]
    b = args.batch or b
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if unknown := set(models) - set(MODELS + EXTRA):
        raise SystemExit(f"--models: unknown {sorted(unknown)}; choose from {MODELS + EXTRA}")
    if "hf" in models and importlib.util.find_spec("transformers") is None:
        print("transformers is not installed: skipping hf")
        models.remove("hf")
    c = TransformerConfig.from_preset(preset, src_vocab_size=vocab, tgt_vocab_size=vocab)
    batch = {k: v.to(device) for k, v in make_batch(b, s, t, vocab).items()}

    env = environment(device)
    for key, value in env.items():
        print(f"{key}: {value}")
    precision = "bf16 autocast" if device.type == "cuda" else "fp32"
    padded = int((batch["labels"] == PAD).any(1).sum())
    print(
        f"shape: {shape} (d {c.d_model}, {c.num_heads} heads, d_ff {c.d_ff}, "
        f"{c.num_encoder_layers}+{c.num_decoder_layers} layers, vocab {vocab}), batch {b} x "
        f"{s} src + {t} tgt tokens ({padded} rows padded), {precision}, "
        f"warmup {args.warmup}, steps {args.steps}, compile {args.compile}\n"
    )

    results = run(models, c, batch, args, device)
    ref = next((r for r in results if r["model"] == "attnkit"), None)
    rows = []
    for r in results:
        ratio = f"{r['tgt_tokens_per_s'] / ref['tgt_tokens_per_s']:.2f}x" if ref else "-"
        mem = f"{r['peak_mem_mib']:.0f}" if r["peak_mem_mib"] is not None else "n/a"
        rows.append([
            r["model"], f"{r['params'] / 1e6:.1f}M",
            f"{r['step_ms']:.1f} ({r['step_ms_min']:.0f}-{r['step_ms_max']:.0f})",
            f"{r['tgt_tokens_per_s']:,.0f}", mem, ratio,
        ])  # fmt: skip
    headers = ["model", "params", "step ms, median (min-max)", "tgt tok/s", "peak MiB",
               "tok/s vs attnkit"]  # fmt: skip
    print(format_table(headers, rows))
    print(f"\nload average at the end: {load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "shape": shape, "batch": b, "args": vars(args),
                       "results": results}, f, indent=2)  # fmt: skip
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
