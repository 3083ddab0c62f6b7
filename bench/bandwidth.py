"""Memory read bandwidth (STREAM-style) and what it allows batch-1 decoding.

Generating one token at batch 1 reads every weight once (a matrix-vector
product per linear) and the KV cache of every earlier position; there is no
reuse to hide behind the caches, so ``tokens/s <= bandwidth / bytes per token``.
This script measures the bandwidth: the best of ``--repeats`` full reads
(a sum, and a matrix-vector product) of a float32 buffer far larger than the
last-level cache (default 1 GiB), with torch at 1 and ``--threads`` threads and with numpy (one
thread, and the buffer's halves summed in two threads: numpy releases the GIL
in reductions). GB/s are 1e9 bytes per second.

``bench/cpu_generate.py`` imports ``read_bandwidth`` (its ceiling's input
when ``--bandwidth`` is not given) and ``weight_bytes_read``/
``kv_bytes_per_position`` (each row's bytes per token).

    python bench/bandwidth.py --gib 1 --repeats 5 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from common import cpu_name, format_table, load_average
from torch import nn

GB = 1e9


def last_level_cache_bytes() -> int | None:
    """The largest cache level's size of CPU 0 (Linux sysfs), or ``None``."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes) if sizes else None


def _best(read: Callable[[], object], nbytes: int, repeats: int) -> tuple[float, float]:
    """(best, median) GB/s of ``repeats`` timed calls of ``read`` after one untimed."""
    read()  # page-in and warm-up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        read()
        rates.append(nbytes / (time.perf_counter() - start) / GB)
    return max(rates), statistics.median(rates)


def torch_read(gib: float = 1.0, threads: int = 2, repeats: int = 5) -> tuple[float, float]:
    """(best, median) GB/s of a torch sum over a ``gib`` GiB float32 buffer, ``threads``."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        buf = torch.ones(int(gib * 2**30) // 4)
        return _best(lambda: buf.sum(), buf.numel() * 4, repeats)
    finally:
        torch.set_num_threads(before)


def torch_mv_read(gib: float = 1.0, threads: int = 2, repeats: int = 5) -> tuple[float, float]:
    """(best, median) GB/s of ``torch.mv`` over a ``gib`` GiB float32 matrix (4096 wide)
    on ``threads`` threads: the read a decode step's matrix-vector products make, which on
    some machines streams faster than a reduction does."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        w = torch.ones(int(gib * 2**30) // (4 * 4096), 4096)
        x = torch.ones(4096)
        return _best(lambda: torch.mv(w, x), w.numel() * 4, repeats)
    finally:
        torch.set_num_threads(before)


def numpy_read(gib: float = 1.0, threads: int = 1, repeats: int = 5) -> tuple[float, float]:
    """(best, median) GB/s of numpy sums over a ``gib`` GiB float32 buffer in ``threads``
    parts summed in as many threads (numpy releases the GIL in a reduction)."""
    arr = np.ones(int(gib * 2**30) // 4, dtype=np.float32)
    if threads == 1:
        return _best(lambda: arr.sum(), arr.nbytes, repeats)
    parts = np.array_split(arr, threads)
    with ThreadPoolExecutor(threads) as pool:
        return _best(lambda: list(pool.map(np.sum, parts)), arr.nbytes, repeats)


def read_bandwidth(gib: float = 1.0, threads: int = 2, repeats: int = 5) -> float:
    """The figure the ceilings use: the best torch read (a sum, a matrix-vector product)
    on ``threads`` threads, GB/s. Any read rate is a lower bound on the bandwidth; the
    better of two kinds of read is the tighter one."""
    return max(torch_read(gib, threads, repeats)[0], torch_mv_read(gib, threads, repeats)[0])


def weight_bytes_read(model: nn.Module) -> int:
    """Bytes of weights one batch-1 decode step reads: every parameter, buffer and packed
    weight at its stored width (oneDNN-packed fp32/bf16, int8 and int4 packed sizes),
    once each, except the token and position tables (embeddings, rotary cos/sin), of which
    a step reads one row (a tied output matrix is still counted: the output layer reads
    all of it)."""
    from attnkit.models.embeddings import TokenEmbedding
    from attnkit.positions.learned import LearnedPositions
    from attnkit.positions.relative import NoPositions
    from attnkit.positions.rotary import RotaryEmbedding
    from attnkit.positions.sinusoidal import SinusoidalPositions
    from attnkit.quantize.int4 import Int4Linear
    from attnkit.quantize.int8_blocks import Int8BlockLinear
    from attnkit.quantize.linear import Int8Linear, PackedLinear
    from attnkit.quantize.model import QuantizedTokenEmbedding

    lookups = (nn.Embedding, TokenEmbedding, QuantizedTokenEmbedding, LearnedPositions,
               RotaryEmbedding, SinusoidalPositions, NoPositions)  # fmt: skip
    seen: set[int] = set()
    total = 0
    for module in model.modules():
        if isinstance(module, lookups):
            continue
        if isinstance(module, PackedLinear | Int8Linear | Int4Linear | Int8BlockLinear):
            total += module.nbytes()  # their weights are no parameters or buffers
        for t in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
    return total


class CacheShape(Protocol):
    """What a decoder config says about its KV cache (``DecoderOnlyConfig``)."""

    @property
    def num_layers(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...


def kv_bytes_per_position(config: CacheShape, element_size: int) -> int:
    """Bytes of keys and values one cached position holds (every layer), read once per step."""
    return 2 * config.num_layers * config.kv_heads * config.head_dim * element_size


def gguf_weight_bytes(path: Path) -> int:
    """Bytes of a GGUF file's tensors at their stored types, less the token embedding
    table unless it is also the output matrix (no ``output.weight``: tied)."""
    from attnkit.interop.gguf.file import open_gguf

    tensors = {t.name: int(t.n_bytes) for t in open_gguf(path).tensors}
    if "output.weight" in tensors:
        tensors.pop("token_embd.weight", None)
    return sum(tensors.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0, help="buffer size (default: 1 GiB)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    llc = last_level_cache_bytes()
    size = f"{llc / 2**20:.0f} MiB" if llc is not None else "unknown"
    print(f"# bandwidth: {cpu_name()}, last-level cache {size}, buffer {args.gib:g} GiB, "
          f"best of {args.repeats}, load {load_average()}")  # fmt: skip
    if llc is not None and args.gib * 2**30 < 8 * llc:
        print(f"# warning: the buffer is under 8x the last-level cache ({size})")
    rows = []
    for threads in sorted({1, args.threads}):
        best, median = torch_read(args.gib, threads, args.repeats)
        rows.append(["torch sum", str(threads), f"{best:.1f}", f"{median:.1f}"])
    for threads in sorted({1, args.threads}):
        best, median = torch_mv_read(args.gib, threads, args.repeats)
        rows.append(["torch mv", str(threads), f"{best:.1f}", f"{median:.1f}"])
    for threads in sorted({1, args.threads}):
        best, median = numpy_read(args.gib, threads, args.repeats)
        rows.append(["numpy sum", str(threads), f"{best:.1f}", f"{median:.1f}"])
    print(format_table(["read", "threads", "GB/s best", "GB/s median"], rows))


if __name__ == "__main__":
    main()
