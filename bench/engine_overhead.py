"""Issue 25: ``--engine ctranslate2`` against raw ``Translator.translate_batch``, same model.

    flock -x /tmp/attnkit-cpu.lock python bench/engine_overhead.py --threads 2

Builds (outside the repo, in ``--work``) a random ``small`` Transformer with
a BPE tokenizer trained on Multi30k's ``train.de``/``train.en`` and
``max_len`` 64, converts it once through the ``--engine`` cache
(``attnkit.engines.registry``), then times on ``--lines`` lines of
``test2016.de``, alternating, best of ``--rounds``:

* raw: ``translate_batch`` of the CTranslate2 model in the cache on
  pre-tokenized pieces (``max_batch_size`` 64, ``length_penalty`` 0, one
  ``max_decoding_length`` of 63: the model's cap);
* engine: ``engine.translate(texts)``, which tokenizes, calls the same
  ``translate_batch`` at the batch's largest output limit and detokenizes.

``--max-len-b`` is large, so every row's limit is the model's cap: both sides
decode the same tokens (the outputs are checked equal). Last, the wall time
of the whole ``attnkit translate --engine ctranslate2`` process (cache hit).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import environment, format_table

DATA = Path("/work/shared/data/multi30k")
CAP = 63  # max_len 64, less BOS


def build_checkpoint(work: Path) -> Path:
    from attnkit.checkpoints import save_checkpoint
    from attnkit.data.tokenizers import BPETokenizer
    from attnkit.models import EncoderDecoder, TransformerConfig

    ckpt = work / "ckpt"
    if (ckpt / "model.safetensors").exists():
        return ckpt
    text = [line for name in ("train.de", "train.en")
            for line in (DATA / name).read_text(encoding="utf-8").splitlines()]  # fmt: skip
    tokenizer = BPETokenizer.train(text, 8000)
    config = TransformerConfig(d_model=256, num_heads=4, d_ff=1024, num_encoder_layers=3,
                               num_decoder_layers=3, max_len=64, dropout=0.0,
                               src_vocab_size=tokenizer.vocab_size,
                               tgt_vocab_size=tokenizer.vocab_size)  # fmt: skip
    torch.manual_seed(0)
    model = EncoderDecoder(config).eval()
    save_checkpoint(ckpt, model_state=model.state_dict(), config=config.to_dict(),
                    tokenizer_json=tokenizer.to_json())  # fmt: skip
    return ckpt


def best_of(rounds: int, fn) -> tuple[float, object]:
    times, out = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lines", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default="/tmp/attnkit-engine-overhead")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import ctranslate2
    import tokenizers

    from attnkit.checkpoints.loading import load_model
    from attnkit.engines.registry import DecodeOptions, RunOptions, open_engine

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    ckpt = build_checkpoint(work)
    texts = (DATA / "test2016.de").read_text(encoding="utf-8").splitlines()[: args.lines]
    run = RunOptions(threads=args.threads)
    engine = open_engine("ctranslate2", ckpt, run, DecodeOptions(beam=1),
                         load=lambda d: load_model(d, "cpu"), say=print)  # fmt: skip
    model_dir = next((ckpt / "engines").glob("ctranslate2-*")) / "model"
    tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    translator = ctranslate2.Translator(str(model_dir), device="cpu", inter_threads=1,
                                        intra_threads=args.threads)  # fmt: skip
    pieces = [tok.encode(t).tokens for t in texts]
    assert max(map(len, pieces)) + 1 < CAP, "a source past the cap: the limits would differ"

    rows = []
    for beam in (1, 4):
        decode = DecodeOptions(beam=beam, alpha=0.0, max_len_b=1000, batch_size=64)

        def raw(beam=beam):
            results = translator.translate_batch(
                pieces, max_batch_size=64, beam_size=beam, length_penalty=0.0,
                max_decoding_length=CAP, min_decoding_length=0, max_input_length=0,
            )  # fmt: skip
            return [r.hypotheses[0] for r in results]

        def ours(decode=decode):
            return engine.translate(texts, decode)

        raw(), ours()  # warm-up
        raw_s, ours_s = [], []
        for _ in range(args.rounds):  # alternate, so that drift hits both sides alike
            raw_s.append(best_of(1, raw)[0])
            ours_s.append(best_of(1, ours)[0])
        got = [row[0] for row in ours()]
        want = [tok.decode([tok.token_to_id(p) for p in h]) for h in raw()]
        same = sum(a == b for a, b in zip(got, want))
        r, o = len(texts) / min(raw_s), len(texts) / min(ours_s)
        rows.append([f"beam {beam}", f"{r:.1f}", f"{o:.1f}", f"{o / r:.3f}",
                     f"{same}/{len(texts)}"])  # fmt: skip

    src = work / "input.de"
    src.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    cli = [sys.executable, "-m", "attnkit", "translate", "--checkpoint", str(ckpt), "--input",
           str(src), "--engine", "ctranslate2", "--greedy", "--max-len-b", "1000"]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    start = time.perf_counter()
    subprocess.run(cli, check=True, stdout=subprocess.DEVNULL, env=env)
    process_s = time.perf_counter() - start

    print(format_table(["search", "raw sent/s", "engine sent/s", "engine/raw", "same lines"],
                       rows))  # fmt: skip
    print(f"attnkit translate --engine ctranslate2 --greedy, whole process (cache hit): "
          f"{process_s:.2f} s for {len(texts)} lines")  # fmt: skip
    for key, value in environment(torch.device("cpu")).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
