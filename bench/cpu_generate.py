"""CPU text generation, batch 1, greedy: attnkit vs HF ``generate`` vs llama.cpp on one GGUF.

Issue 15's speed measurement. Every engine continues the same prompt ids for
exactly ``--new-tokens`` tokens (EOS ignored), greedy, one sequence, on
``--threads`` CPU threads. Reported per engine: load time (file to ready), the
prefill (prompt in, first new token out) and the decode rate of the remaining
tokens, as medians over ``--rounds`` rounds timed round-robin (one generation of
each engine per round, so load from other processes hits all alike), after one
warm-up generation each (which is also when ``torch.compile`` compiles).

Engines (``--engines``):

* ``attnkit``, ``attnkit_bf16``, ``attnkit_int8``, ``attnkit_int8w``, ``attnkit_int4``: what
  ``attnkit generate --precision fp32|bf16|int8|int8w|int4`` runs on the CPU, by the
  command's own conversion (``attnkit.inference.make_plan`` + ``prepare`` at 1 row):
  ``quantize_model`` (fp32 linears oneDNN-packed or plain, whichever
  ``attnkit.kernels.fp32_choice`` finds faster here at 1 row, as ``generate``
  asks; AVX512-BF16 weights; fbgemm int8
  with dynamic activations after SmoothQuant calibrated on attnkit's built-in
  text, int8 weights with bf16 activations) on the model's own KV cache
  (``stepper_for(model)``); ``attnkit_int8_plain``: int8 without SmoothQuant
  (round 10's ``--precision int8``); ``attnkit_stored``: no ``--precision`` at all
  (a checkpoint imported with ``--keep-quantized`` runs its GGUF blocks as stored);
* ``attnkit_plain``, ``attnkit_packed``: fp32 on the same path with MKL's
  plain linears (``quantize_model(model, "fp32", pack_fp32=False)``) or the
  oneDNN-packed ones, whatever the machine's choice (``attnkit`` is one of them);
* ``attnkit_compiled``, ``attnkit_compiled_bf16``, ``attnkit_compiled_int8``,
  ``attnkit_compiled_int8w``, ``attnkit_compiled_int4``: what ``attnkit generate
  --compile --precision P`` runs (issue 47): the static cache, the decode step
  compiled with the precision's linears inside it (inductor's C++ wrapper,
  frozen weights, its GEMM templates timed against aten's kernels:
  ``attnkit.decoding.static.FROZEN_TUNED``; ``attnkit_compiled_stored``: the stored
  blocks); fp32 as plain linears, which inductor
  takes into its own GEMM template or MKL's. The warm-up generation compiles; its seconds are the
  "first run s" column, and a line per compiled engine says how much of it
  the compile took (first run minus a timed run);
* ``hf``: ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`` in fp32,
  ``generate``; prefill and decode are split by a logits processor that
  notes the time of each new token;
* ``llama_cpp``: ``llama-cpp-python`` on the GGUF file as it is (its own
  quantized kernels), skipped when the package is missing;
* ``llama_cpp_f32``, ``llama_cpp_q8_0``: ``attnkit generate --engine llama.cpp
  --precision fp32|int8``, llama.cpp on the checkpoint's own GGUF export (the
  same weights as ``attnkit``; the first use converts, which the load time
  leaves out: it is timed on the second opening).

Token agreement with the first attnkit engine is printed for each engine.

The bandwidth limit (issue 47): a batch-1 decode step reads every weight once and
the KV cache of every earlier position, so ``decode tok/s <= bandwidth / bytes per
token``. Each row prints its bytes per token (weights as the engine holds them:
fp32, bf16, int8 or int4 packed sizes, GGUF tensors at their stored types; the
embedding table counted only where it is the output matrix too; plus the KV
cache at the decode's mean position: fp32 for attnkit and HF, f16 for llama.cpp),
the ceiling that implies at ``--bandwidth`` GB/s (default: measured at start by
``bench/bandwidth.py``'s read of a 1 GiB buffer on ``--threads`` threads), and the
row's share of it.

    python bench/cpu_generate.py --checkpoint runs/smollm2 --gguf SmolLM2-135M-Instruct.Q4_1.gguf
    python bench/cpu_generate.py ... --engines attnkit --profile   # torch.profiler of decode steps
    python bench/cpu_generate.py ... --bandwidth 20.5   # the ceiling at a bandwidth measured before
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from bandwidth import gguf_weight_bytes, kv_bytes_per_position, read_bandwidth, weight_bytes_read
from common import cpu_features, cpu_name, environment, format_table, load_average
from torch import Tensor

PROMPT = "<|im_start|>user\nWrite a short story about a robot who learns to paint.<|im_end|>\n"
PROMPT += "<|im_start|>assistant\n"
Run = Callable[[list[int], int], tuple[float, float, list[int]]]
# What an engine reads per token: (weight bytes, KV cache bytes per cached position).
Traffic = tuple[int, int]


# -- attnkit ----------------------------------------------------------------------------


def _asked(precision: str) -> str | None:
    """``stored``: no ``--precision`` (a checkpoint of GGUF blocks runs them as stored)."""
    return None if precision == "stored" else precision


def attnkit_engine(checkpoint: Path, variant: str) -> tuple[float, Run, Traffic]:
    from attnkit.checkpoints import load_model
    from attnkit.decoding.static import StaticCacheStepper
    from attnkit.inference import CheckpointInfo, Machine, Options, make_plan, prepare, stepper_for
    from attnkit.kernels import fp32_choice
    from attnkit.quantize import quantize_model

    start = time.perf_counter()
    loaded = load_model(checkpoint, "cpu")
    model = loaded.model
    stepper: Any
    if variant == "attnkit_int8_plain":
        stepper = stepper_for(quantize_model(model, "int8"))
    elif variant.startswith("attnkit_compiled"):  # `generate --compile --precision P`
        precision = variant.removeprefix("attnkit_compiled").removeprefix("_") or "fp32"
        options = Options(precision=_asked(precision), path="compiled", rows=1, calibrate=True)
        info = CheckpointInfo.of(model, loaded.family.kind, loaded.weights)
        stepper = prepare(loaded, make_plan(info, Machine.of(model), options))
        assert isinstance(stepper, StaticCacheStepper) and stepper.compile
    elif variant in ("attnkit_plain", "attnkit_packed"):  # one fp32 choice, forced
        stepper = stepper_for(quantize_model(model, "fp32", pack_fp32=variant == "attnkit_packed"))
    else:  # what `attnkit generate --precision P` runs on the CPU: its own conversion
        precision = variant.removeprefix("attnkit").removeprefix("_") or "fp32"
        if precision == "fp32":  # say which fp32 linears this machine gets (cached choice)
            print(f"# attnkit fp32: {fp32_choice.choose(model, rows=1).describe()}", flush=True)
        options = Options(precision=_asked(precision), rows=1, calibrate=True)
        info = CheckpointInfo.of(model, loaded.family.kind, loaded.weights)
        plan = make_plan(info, Machine.of(model), options)
        stepper = prepare(loaded, plan)
    seconds = time.perf_counter() - start
    # the model as it runs (converted in place); the cache in the activations' dtype
    cache_dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
    traffic = (weight_bytes_read(model), kv_bytes_per_position(model.config, cache_dtype.itemsize))

    @torch.inference_mode()
    def run(ids: list[int], n: int) -> tuple[float, float, list[int]]:
        prompt = torch.tensor([ids])
        t0 = time.perf_counter()
        state = stepper.start(prompt, max_steps=n)
        logits, state = stepper.step(prompt[:, -1], state)
        token = logits.argmax(-1)
        out = [int(token)]
        t1 = time.perf_counter()
        for _ in range(n - 1):
            logits, state = stepper.step(token, state)
            token = logits.argmax(-1)
            out.append(int(token))
        return t1 - t0, time.perf_counter() - t1, out

    return seconds, run, traffic


# -- Hugging Face -----------------------------------------------------------------------


def hf_engine(gguf: Path) -> tuple[float, Run, Traffic]:
    import transformers

    start = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    ).eval()
    seconds = time.perf_counter() - start

    class Clock(transformers.LogitsProcessor):
        def __init__(self) -> None:
            self.times: list[float] = []

        def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
            self.times.append(time.perf_counter())
            return scores

    @torch.inference_mode()
    def run(ids: list[int], n: int) -> tuple[float, float, list[int]]:
        clock = Clock()
        prompt = torch.tensor([ids])
        t0 = time.perf_counter()
        out = model.generate(
            prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0,
            logits_processor=transformers.LogitsProcessorList([clock]),
        )  # fmt: skip
        end = time.perf_counter()
        # The clock ticks once per new token, just after its forward: the first tick
        # ends the prefill; the sampling after the last tick belongs to the decode.
        return clock.times[0] - t0, end - clock.times[0], out[0, len(ids) :].tolist()

    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv = 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * 4  # fp32 cache
    return seconds, run, (weight_bytes_read(model), kv)


# -- llama.cpp --------------------------------------------------------------------------


def _llama_cpp_greedy(llm: Any, ids: list[int], n: int) -> tuple[float, float, list[int]]:
    """``n`` greedy ids from a ``llama_cpp.Llama`` with its own greedy sampler.

    ``reset()`` first: otherwise ``generate`` reuses the cached prompt of the
    last run and skips the prefill. (llama-cpp-python 0.3.36 no longer keeps
    the logits in ``scores`` unless ``logits_all``, so an argmax over them, as
    this bench did before, read zeros.)
    """
    llm.reset()
    t0 = time.perf_counter()
    out: list[int] = []
    t1 = t0
    for token in llm.generate(ids, temp=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
        out.append(int(token))
        if len(out) == 1:
            t1 = time.perf_counter()
        if len(out) == n:
            break
    return t1 - t0, time.perf_counter() - t1, out


def _llama_cpp_traffic(path: Path, kv_f32: int) -> Traffic:
    """The GGUF's tensors as stored; llama.cpp's default f16 KV cache (half the fp32 bytes)."""
    return gguf_weight_bytes(path), kv_f32 // 2


def llama_cpp_engine(gguf: Path, threads: int, kv_f32: int) -> tuple[float, Run, Traffic]:
    from llama_cpp import Llama

    start = time.perf_counter()
    llm = Llama(model_path=str(gguf), n_ctx=512, n_batch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)  # fmt: skip
    seconds = time.perf_counter() - start
    traffic = _llama_cpp_traffic(gguf, kv_f32)
    return seconds, lambda ids, n: _llama_cpp_greedy(llm, ids, n), traffic


def attnkit_llama_cpp_engine(
    checkpoint: Path, name: str, threads: int, kv_f32: int
) -> tuple[float, Run, Traffic]:
    """``attnkit generate --engine llama.cpp --precision fp32|int8``: the checkpoint's own
    GGUF export (f32 / q8_0, converted once into its engine cache) on llama.cpp."""
    from attnkit.checkpoints import load_model
    from attnkit.engines.registry import RunOptions, open_generator

    precision = {"llama_cpp_f32": "fp32", "llama_cpp_q8_0": "int8"}[name]
    run = RunOptions(precision=precision, threads=threads)
    start = time.perf_counter()
    engine = open_generator("llama.cpp", checkpoint, run, 512,
                            load=lambda d: load_model(d, "cpu"), say=print)  # fmt: skip
    seconds = time.perf_counter() - start  # a cache hit: the conversion is done before
    traffic = _llama_cpp_traffic(Path(engine.model.model_path), kv_f32)
    return seconds, lambda ids, n: _llama_cpp_greedy(engine.model, ids, n), traffic


# -- the measurement --------------------------------------------------------------------


def profile_decode(checkpoint: Path, variant: str, ids: list[int], steps: int = 32) -> str:
    """torch.profiler over ``steps`` decode steps: the ops by self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    _, run, _ = attnkit_engine(checkpoint, variant)
    run(ids, steps + 1)  # warm-up (and compile)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run(ids, steps + 1)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="attnkit import output")
    parser.add_argument("--gguf", type=Path, help="the GGUF file itself (hf, llama_cpp)")
    parser.add_argument(
        "--engines",
        default="attnkit,attnkit_compiled,attnkit_bf16,attnkit_int8,attnkit_int8w,hf,llama_cpp",
    )
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--profile", action="store_true", help="profile the first engine's decode")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--bandwidth", type=float, metavar="GBS",
        help="memory read bandwidth in GB/s for the ceilings (default: measured at start)",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from attnkit.checkpoints import load_tokenizer

    tokenizer = load_tokenizer(args.checkpoint)
    assert tokenizer is not None, f"{args.checkpoint}: no tokenizer.json"
    ids = tokenizer.encode(args.prompt)
    names = [e.strip() for e in args.engines.split(",") if e.strip()]
    if args.profile:
        print(profile_decode(args.checkpoint, names[0], ids))
        return
    print(f"# cpu_generate: {cpu_name()}, {args.threads} threads, prompt {len(ids)} tokens, "
          f"{args.new_tokens} new, load before {load_average()}")  # fmt: skip
    print(f"# cpu features: {cpu_features()}")
    if args.bandwidth is None:
        args.bandwidth = read_bandwidth(threads=args.threads)
        print(f"# bandwidth: {args.bandwidth:.1f} GB/s measured (bench/bandwidth.py: the "
              f"better of a torch sum and a torch.mv over 1 GiB, {args.threads} threads, "
              f"best of 5)")  # fmt: skip
    else:
        print(f"# bandwidth: {args.bandwidth:.1f} GB/s (--bandwidth)")
    from attnkit.checkpoints import load_model

    # fp32 keys and values per cached position (the engines' cache widths follow from it)
    kv_f32 = kv_bytes_per_position(load_model(args.checkpoint, "cpu").config, 4)

    loads: dict[str, float] = {}
    runs: dict[str, Run] = {}
    traffic: dict[str, Traffic] = {}
    for name in names:
        try:
            if name.startswith("attnkit"):
                loads[name], runs[name], traffic[name] = attnkit_engine(args.checkpoint, name)
            elif name in ("hf", "llama_cpp") and args.gguf is None:
                raise SystemExit(f"--engines {name}: needs --gguf")
            elif name == "hf":
                loads[name], runs[name], traffic[name] = hf_engine(args.gguf)
            elif name == "llama_cpp":
                engine = llama_cpp_engine(args.gguf, args.threads, kv_f32)
                loads[name], runs[name], traffic[name] = engine
            elif name in ("llama_cpp_f32", "llama_cpp_q8_0"):
                attnkit_llama_cpp_engine(args.checkpoint, name, args.threads, kv_f32)  # converts
                engine = attnkit_llama_cpp_engine(args.checkpoint, name, args.threads, kv_f32)
                loads[name], runs[name], traffic[name] = engine
            else:
                raise SystemExit(f"--engines: unknown engine {name!r}")
        except ImportError as e:
            print(f"# {name}: skipped ({e})")
    warm: dict[str, float] = {}
    tokens: dict[str, list[int]] = {}
    for name, run in runs.items():  # warm-up: compiles, page-ins, allocator
        start = time.perf_counter()
        tokens[name] = run(ids, args.new_tokens)[2]
        warm[name] = time.perf_counter() - start
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            prefill, decode, _ = run(ids, args.new_tokens)
            samples[name].append((prefill, decode))

    for name in runs:  # a compiled engine's first run compiles: how long that took
        if "compiled" in name:
            timed = min(p + d for p, d in samples[name])
            print(f"# {name}: first run {warm[name]:.1f} s, a timed run {timed:.1f} s: "
                  f"compile ~{warm[name] - timed:.1f} s")  # fmt: skip
    reference = tokens[next(iter(runs))]
    # The decode steps attend over the prompt and, on average, half the new tokens.
    mean_cached = len(ids) + args.new_tokens / 2
    hf_rate = None
    rows, results = [], []
    for name in runs:
        prefill = statistics.median(p for p, _ in samples[name])
        rates = [(args.new_tokens - 1) / d for _, d in samples[name]]
        rate = statistics.median(rates)
        if name == "hf":
            hf_rate = rate
        same = sum(a == b for a, b in zip(tokens[name], reference))
        weights, kv = traffic[name]
        per_token = weights + kv * mean_cached
        ceiling = args.bandwidth * 1e9 / per_token
        results.append({"engine": name, "load_s": loads[name], "first_run_s": warm[name],
                        "prefill_ms": 1000 * prefill, "decode_tok_s": rate,
                        "decode_tok_s_all": rates, "same_tokens": same,
                        "weight_bytes": weights, "kv_bytes_per_token": kv * mean_cached,
                        "bytes_per_token": per_token, "ceiling_tok_s": ceiling,
                        "share_of_ceiling": rate / ceiling})  # fmt: skip
    llama_rate = next((r["decode_tok_s"] for r in results if r["engine"] == "llama_cpp"), None)
    for r in results:
        vs_hf = f"{r['decode_tok_s'] / hf_rate:.2f}x" if hf_rate else "-"
        vs_llama = f"{r['decode_tok_s'] / llama_rate:.2f}x" if llama_rate else "-"
        spread = "-".join(f"{x:.1f}" for x in (min(r["decode_tok_s_all"]),
                                               max(r["decode_tok_s_all"])))  # fmt: skip
        rows.append([r["engine"], f"{r['load_s']:.2f}", f"{r['first_run_s']:.1f}",
                     f"{r['prefill_ms']:.0f}", f"{r['decode_tok_s']:.1f} ({spread})", vs_hf,
                     vs_llama, f"{r['same_tokens']}/{args.new_tokens}",
                     f"{r['bytes_per_token'] / 1e6:.1f}", f"{r['ceiling_tok_s']:.1f}",
                     f"{100 * r['share_of_ceiling']:.0f}%"])  # fmt: skip
    headers = ["engine", "load s", "first run s", "prefill ms", "decode tok/s (min-max)",
               "vs HF", "vs llama.cpp", "same tokens", "MB/token", "ceiling tok/s",
               "of ceiling"]  # fmt: skip
    print(format_table(headers, rows))
    print(f"# load after {load_average()}")
    if args.json:
        env = environment(torch.device("cpu"))
        payload: dict[str, Any] = {
            "env": env, "prompt_tokens": len(ids), "new_tokens": args.new_tokens,
            "threads": args.threads, "bandwidth_gb_s": args.bandwidth, "results": results,
        }  # fmt: skip
        args.json.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
