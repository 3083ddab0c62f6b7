"""llama.cpp on a GGUF file from ``attnkit export --to gguf``: the same greedy text as attnkit?

    python experiments/gguf_llama_cpp.py RUN FILE.gguf --node-dir DIR [--max-new-tokens 50]

``RUN`` is the attnkit run or checkpoint the file was exported from, ``DIR`` a
folder where ``npm i -E node-llama-cpp@3.21.1`` was run: node-llama-cpp ships
llama.cpp prebuilt for linux-x64, a second build of llama.cpp beside the one
the tests run (llama-cpp-python, built from source: ``attnkit generate --engine
llama.cpp``, ``tests/engines/test_llama_cpp.py``). For each of 10 prompts it
prints whether llama.cpp's token ids for the prompt equal attnkit's tokenizer's
and whether llama.cpp's greedy continuation (temperature 0, stopping at an
end-of-generation token) equals ``attnkit generate --temperature 0``'s
(greedy on the static cache, stopping at EOS). Special tokens in the prompts
(``<|im_start|>``) are parsed as such on both sides. Not a test: CI has no
node-llama-cpp.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from attnkit.checkpoints import load_model
from attnkit.decoding.generate import generate
from attnkit.inference import stepper_for

PROMPTS = [  # also the prompts of the SmolLM2 tests (tests/gguf_helpers.py)
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):\n    ",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "The three primary colors are",
    "import numpy as np\nx = np.",
    "Q: Who wrote Hamlet?\nA:",
    "In 1969, the first humans",
    "La tour Eiffel se trouve à",
]

RUNNER = """
import fs from "fs";
import {getLlama, LlamaCompletion} from "node-llama-cpp";
const [modelPath, promptsFile, maxTokens] = process.argv.slice(2);
const prompts = JSON.parse(fs.readFileSync(promptsFile, "utf8"));
const llama = await getLlama({build: "never", gpu: false});
const model = await llama.loadModel({modelPath});
const out = [];
for (const prompt of prompts) {
  const context = await model.createContext({contextSize: 512, threads: 2});
  const completion = new LlamaCompletion({contextSequence: context.getSequence()});
  const ids = model.tokenize(prompt, true);  // special tokens parsed, as attnkit's tokenizer does
  const text = await completion.generateCompletion(ids, {maxTokens: Number(maxTokens),
                                                          temperature: 0});
  out.push({ids: Array.from(ids), text});
  await context.dispose();
}
console.log(JSON.stringify(out));
"""


def llama_cpp(gguf_file: Path, node_dir: Path, max_new_tokens: int) -> list[dict]:
    """llama.cpp's prompt ids and greedy continuation per prompt."""
    runner = node_dir / "attnkit_gguf_runner.mjs"  # beside node_modules, so the import resolves
    runner.write_text(RUNNER, encoding="utf-8")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(PROMPTS, fh)
    done = subprocess.run(
        ["node", str(runner), str(gguf_file.resolve()), fh.name, str(max_new_tokens)],
        capture_output=True, text=True, check=True, cwd=node_dir,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("gguf", type=Path)
    parser.add_argument("--node-dir", type=Path, required=True)
    parser.add_argument("--max-new-tokens", type=int, default=50)
    args = parser.parse_args()
    start = time.perf_counter()
    theirs = llama_cpp(args.gguf, args.node_dir, args.max_new_tokens)
    print(f"llama.cpp ran in {time.perf_counter() - start:.0f} s")
    loaded = load_model(args.run, "cpu")
    model, tokenizer = loaded.model, loaded.tokenizer
    stepper = stepper_for(model)
    same_ids = same_text = 0
    for prompt, their in zip(PROMPTS, theirs):
        ids = tokenizer.encode(prompt)
        out = generate(model, torch.tensor([ids]), args.max_new_tokens, temperature=0.0,
                       stepper=stepper, eos_id=model.eos_id)  # fmt: skip
        text = tokenizer.decode(out[0, len(ids) :].tolist())
        same_ids += ids == their["ids"]
        same_text += text == their["text"]
        mark = "same" if text == their["text"] else "DIFFERENT"
        print(f"{mark}: {prompt!r}\n  attnkit:   {text!r}\n  llama.cpp: {their['text']!r}")
    print(f"prompt ids equal on {same_ids}/{len(PROMPTS)} prompts, greedy text equal on "
          f"{same_text}/{len(PROMPTS)} ({args.max_new_tokens} new tokens at most)")  # fmt: skip


if __name__ == "__main__":
    main()
