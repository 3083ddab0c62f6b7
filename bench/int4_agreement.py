"""Issue 47: int4's next-token agreement with fp32, attnkit RTN and AWQ against llama.cpp q4_0.

    python bench/int4_agreement.py --checkpoint RUN      # RUN: attnkit import --from gguf

For each of the 10 prompts of ``experiments/gguf_llama_cpp.py`` (those of the
SmolLM2 tests), fp32 generates ``--new-tokens`` greedy tokens (attnkit's
decode step; past an end-of-turn token too, so every prompt gives as many
positions). Every model then reads prompt + continuation in one forward
(teacher-forced), and at each continuation position its argmax is compared
with the same model family's fp32 argmax:

* attnkit: ``int4`` (``quantize_model(m, "int4")``: RTN in groups of 32) and
  ``int4_awq`` (``quantize_model(m, "int4", calibrate=lm_calibration(tok))``:
  activation-aware scales and clipping, calibrated on attnkit's built-in text,
  which none of the prompts is), ``int4_awq_noclip`` (scales only),
  ``int4_awq_no_vo`` (no fold into attention's values), ``int8w`` for scale; all
  against attnkit fp32;
* ``llama.cpp q4_0``: the checkpoint exported with ``attnkit export --to gguf``
  at ``--precision f32`` and ``q4_0`` (``attnkit.interop.gguf.export``; q4_0
  by the ``gguf`` package's reference quantizer, every matrix including the
  tied embedding), both run by llama-cpp-python with ``logits_all=True`` on the
  same token ids; q4_0's argmax against f32's; and ``llama-quantize q4_0``: the
  f32 file quantized by llama.cpp's own quantizer (``llama_model_quantize``,
  which keeps the output matrix, the tied embedding here, at Q6_K), the file
  llama.cpp's users would make.

With ``--kept q8_0`` (or ``q4_0``, comma-separated): the checkpoint's export at that
type imported back with ``import --from gguf --keep-quantized`` and run as stored
(its blocks on the int4 kernel) against attnkit fp32, beside llama.cpp on the same
file against its f32.

Also the median relative logit error (``max|l - l_ref| / max|l_ref|`` per
position), and the seconds ``quantize_model`` took (calibration included). Accuracy
only: one thread, any machine load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from common import cpu_name, format_table
from int8_agreement import logits_along
from torch import Tensor, nn

from attnkit.checkpoints import load_model
from attnkit.quantize import quantize_model
from attnkit.quantize.smooth import Encodes, lm_calibration


def prompts() -> list[str]:
    """The 10 prompts of ``experiments/gguf_llama_cpp.py`` (one list, imported from there)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    from gguf_llama_cpp import PROMPTS

    return list(PROMPTS)


def _awq(model: nn.Module, tok: Encodes, clip: bool = True, values: bool = True) -> nn.Module:
    """``quantize_model(..., "int4", calibrate=...)``; ``clip=False``: without the clipping
    search, ``values=False``: without the fold into attention's values (probes)."""
    from attnkit.quantize import awq
    from attnkit.quantize import model as quantize_module

    saved = awq.CLIP_RATIOS, awq._value_pairs, quantize_module.apply_awq
    if not clip:
        awq.CLIP_RATIOS = (1.0,)
    if not values:
        awq._value_pairs = lambda _: []

    def counted(*args: Any, **kwargs: Any) -> int:
        SCALED.append(saved[2](*args, **kwargs))
        return SCALED[-1]

    quantize_module.apply_awq = counted
    try:
        return quantize_model(model, "int4", calibrate=lm_calibration(tok))
    finally:
        awq.CLIP_RATIOS, awq._value_pairs, quantize_module.apply_awq = saved


SCALED: list[int] = []  # how many linears each AWQ variant scaled (a failed check: fewer)


VARIANTS: dict[str, Callable[[nn.Module, Encodes], nn.Module]] = {
    "int8w": lambda m, _: quantize_model(m, "int8w"),
    "int4": lambda m, _: quantize_model(m, "int4"),
    "int4_awq": lambda m, tok: _awq(m, tok),
    "int4_awq_noclip": lambda m, tok: _awq(m, tok, clip=False),
    "int4_awq_no_vo": lambda m, tok: _awq(m, tok, values=False),
}


@torch.inference_mode()
def forced_logits(model: nn.Module, sequences: list[tuple[list[int], list[int]]]) -> list[Tensor]:
    """Per (prompt, continuation): the logits ``(n, V)`` predicting each continuation token."""
    out = []
    for prompt, cont in sequences:
        ids = torch.tensor([prompt + cont[:-1]])
        out.append(model(ids).logits[0, len(prompt) - 1 :].float())
    return out


def llama_cpp_logits(path: Path, sequences: list[tuple[list[int], list[int]]]) -> list[Tensor]:
    """The same as ``forced_logits``, from llama.cpp (llama-cpp-python) on a GGUF file."""
    from llama_cpp import Llama

    longest = max(len(p) + len(c) for p, c in sequences)
    llm = Llama(str(path), n_ctx=longest + 8, n_batch=longest + 8, logits_all=True,
                n_threads=1, verbose=False)  # fmt: skip
    out = []
    for prompt, cont in sequences:
        llm.reset()
        tokens = prompt + cont[:-1]
        llm.eval(tokens)
        scores = torch.from_numpy(llm.scores[: len(tokens)].copy())
        out.append(scores[len(prompt) - 1 :].float())
    return out


def llama_quantize(source: Path, out: Path) -> Path:
    """``source`` (f32 GGUF) quantized to q4_0 by llama.cpp's own ``llama_model_quantize``
    (as ``llama-quantize FILE OUT q4_0``: the output matrix, here the tied embedding, Q6_K)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.nthread = 1
    if llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params) != 0:
        raise RuntimeError(f"llama_model_quantize failed on {source}")
    return out


def compare(logits: list[Tensor], ref: list[Tensor]) -> tuple[int, int, float]:
    """(positions whose argmax is the reference's, positions, median relative error)."""
    same = total = 0
    rel: list[float] = []
    for a, b in zip(logits, ref, strict=True):
        same += int((a.argmax(-1) == b.argmax(-1)).sum())
        total += a.size(0)
        rel += ((a - b).abs().amax(-1) / b.abs().amax(-1)).tolist()
    return same, total, statistics.median(rel)


def _kept_row(
    name: str,
    file: Path,
    tmp: Path,
    sequences: list[tuple[list[int], list[int]]],
    ref: list[Tensor],
) -> list[str]:
    """The row of GGUF ``file`` imported with ``--keep-quantized``, run as stored."""
    from attnkit.interop.gguf.importer import import_gguf

    start = time.perf_counter()
    model = load_model(import_gguf(file, tmp / f"kept_{name}", keep_quantized=True), "cpu").model
    seconds = time.perf_counter() - start
    same, total, median = compare(forced_logits(model.eval(), sequences), ref)
    return [f"attnkit {name} blocks kept (import --keep-quantized)", f"{same}/{total}",
            f"{same / total:.1%}", f"{median:.4f}", f"{seconds:.1f}"]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a Llama-type decoder-only run")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--variants", default="int4,int4_awq,int4_awq_noclip,int4_awq_no_vo,int8w")
    p.add_argument("--no-llama-cpp", action="store_true", help="skip the GGUF exports")
    p.add_argument("--kept", default="", help="GGUF types kept as blocks: q8_0, q4_0 (module doc)")
    args = p.parse_args()
    torch.set_num_threads(1)
    loaded = load_model(args.checkpoint, "cpu")
    tokenizer = loaded.tokenizer
    assert tokenizer is not None
    n = args.new_tokens

    def fresh() -> nn.Module:
        return load_model(args.checkpoint, "cpu").model.eval()

    encoded = [tokenizer.encode(text) for text in prompts()]
    ref_model = fresh()
    sequences = [(ids, logits_along(ref_model, ids, None, n)[0]) for ids in encoded]
    ref = forced_logits(ref_model, sequences)
    rows = []
    for name in args.variants.split(","):
        float_model = fresh()
        start = time.perf_counter()
        model = VARIANTS[name](float_model, tokenizer)
        seconds = time.perf_counter() - start
        same, total, median = compare(forced_logits(model, sequences), ref)
        scaled = f" ({SCALED.pop()} linears scaled)" if SCALED else ""
        rows.append([f"attnkit {name}{scaled}", f"{same}/{total}", f"{same / total:.1%}",
                     f"{median:.4f}", f"{seconds:.1f}"])  # fmt: skip
    if not args.no_llama_cpp:
        from attnkit.interop.gguf.export import export_gguf

        with tempfile.TemporaryDirectory() as tmp:
            files = {}
            kept = [k for k in args.kept.split(",") if k]
            for precision in dict.fromkeys(("f32", "q4_0", *kept)):
                files[precision] = export_gguf(loaded, Path(tmp) / f"{precision}.gguf",
                                               precision=precision)  # fmt: skip
            f32 = llama_cpp_logits(files["f32"], sequences)
            same, total, median = compare(f32, ref)
            rows.append(["llama.cpp f32 vs attnkit fp32", f"{same}/{total}",
                         f"{same / total:.1%}", f"{median:.4f}", "-"])  # fmt: skip
            files["llama-quantize q4_0"] = llama_quantize(files["f32"], Path(tmp) / "lq.gguf")
            sizes = ", ".join(f"{k} {v.stat().st_size / 1e6:.1f} MB" for k, v in files.items())
            print(f"GGUF files: {sizes}")
            for name in dict.fromkeys(("q4_0", "llama-quantize q4_0", *kept)):
                same, total, median = compare(llama_cpp_logits(files[name], sequences), f32)
                rows.append([f"llama.cpp {name} vs its f32", f"{same}/{total}",
                             f"{same / total:.1%}", f"{median:.4f}", "-"])  # fmt: skip
            for name in kept:
                rows.append(_kept_row(name, files[name], Path(tmp), sequences, ref))
    header = ["model", "top-1 = reference", "share", "logits rel err median", "convert s"]
    print(format_table(header, rows))
    print(f"{len(encoded)} prompts, {n} teacher-forced positions each; {cpu_name()}; "
          f"torch {torch.__version__}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
