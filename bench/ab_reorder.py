"""A/B of `CpuState`'s beam reorder: gather into a spare and swap (now) vs copy back (before).

Same int8 model, beam 4, issue setup, round-robin. Run: ``python bench/ab_reorder.py --rounds 5``.
"""

from __future__ import annotations

import argparse

import torch
from common import median, round_robin  # bench/ on sys.path; puts the repo on it too
from engines import build_model, random_source

from attnkit.decoding import beam_search
from attnkit.decoding.constraints import MinLength
from attnkit.quantize import CpuState, CpuStepper, quantize_model


class CopyBackState(CpuState):
    """The previous reorder: allocate the gathered prefix, then copy it back in place."""

    def _select_prefix(self, indices: torch.Tensor) -> None:
        n = self.length
        for bufs in (self.self_k, self.self_v):
            for i, buf in enumerate(bufs):
                if indices.numel() == buf.size(0):
                    buf[:, :, :n] = buf[:, :, :n].index_select(0, indices)
                else:
                    new = buf.new_empty((indices.numel(), *buf.shape[1:]))
                    new[:, :, :n] = buf[:, :, :n].index_select(0, indices)
                    bufs[i] = new


class CopyBackStepper(CpuStepper):
    def start(self, src_ids: torch.Tensor, *, max_steps: int | None = None) -> CpuState:
        s = super().start(src_ids, max_steps=max_steps)
        return CopyBackState(s.self_k, s.self_v, s.cross_k, s.cross_v, s.src_mask)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = quantize_model(build_model(8000), "int8")
    src = random_source(32, 32, 8000)
    steppers = {"swap (now)": CpuStepper(model), "copy back (before)": CopyBackStepper(model)}
    runs = {
        name: (lambda s=s: beam_search(MinLength(s, 40), src, beam_size=4, max_len=40).tokens)
        for name, s in steppers.items()
    }
    with torch.inference_mode():
        outs = {name: run() for name, run in runs.items()}
        times = round_robin(runs, args.rounds, torch.device("cpu"))
    assert outs["swap (now)"] == outs["copy back (before)"]
    base = median(times["copy back (before)"])
    for name, ts in times.items():
        print(f"{name:20s} {32 / median(ts):6.2f} sent/s  {base / median(ts):.2f}x  "
              f"rounds {', '.join(f'{t:.2f}' for t in ts)} s")  # fmt: skip


if __name__ == "__main__":
    main()
