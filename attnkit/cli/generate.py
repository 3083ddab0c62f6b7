"""Continue a prompt with a decoder-only (GPT-style) checkpoint, printing as it goes.

The prompt is echoed, then each new piece of text is written to standard
output as soon as its token is drawn. Sampling uses --temperature (0 = greedy),
--top-k and --top-p; --seed makes it reproducible. Generation stops after
--max-new-tokens or at the model's end-of-sequence token (an instruct model's
end of turn; --ignore-eos runs on). Past the model's context length the window
slides, as in nanoGPT.

--chat treats --prompt as a user message: the conversation (with --system
first, if given) is written in the model's chat template (an instruct model
imported with one, e.g. SmolLM2-Instruct from GGUF, or a run fine-tuned from
it), ending with the assistant's header, and only the reply is printed.

  attnkit generate --checkpoint runs/smollm2 --chat --prompt "Name three primes." \
      --temperature 0

Speculative decoding drafts several tokens that the model checks in one pass:
--prompt-lookup K drafts up to K tokens by finding the text's last few tokens
earlier in the prompt and output and proposing what followed them (faster when
the reply copies from the prompt: a quote, a summary, an edit); --draft CKPT
has a small decoder-only model with the same tokenizer draft --draft-tokens K
(default 4). Greedy prints the same text as without a drafter; sampling draws
from the same distribution (the standard acceptance rule). With --debug,
stderr gets the tokens per model pass, the draft tokens accepted per step,
tokens/s and the speed-up over plain decoding (timed after it).

  attnkit generate --checkpoint runs/smollm2 --chat --temperature 0 \
      --prompt "Repeat this paragraph: ..." --prompt-lookup 10
  attnkit generate --checkpoint runs/smollm2-360m --draft runs/smollm2 --draft-tokens 4

--engine llama.cpp runs a Llama-type checkpoint on llama.cpp (llama-cpp-python)
instead: the first use exports it to GGUF into CHECKPOINT/engines/, reused
afterwards; greedy (--temperature 0) prints the same text as attnkit where the
two engines' argmaxes agree; see attnkit.engines.llama_cpp.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from attnkit.cli import drafting
from attnkit.cli.argtypes import finite_float, integer, seed
from attnkit.cli.common import (
    CHECKPOINT_HELP,
    add_device_argument,
    add_precision_argument,
    named_checkpoint,
)
from attnkit.cli.inference_args import COMPILE_CHOICES
from attnkit.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from attnkit.checkpoints.loading import LoadedModel
    from attnkit.data.tokenizers import Tokenizer
    from attnkit.decoding.protocol import AnyStepper
    from attnkit.inference import InferencePlan

# attnkit.engines.registry.GENERATOR_NAMES, spelled out so that parsing imports no engine.
ENGINES = ("attnkit", "llama.cpp")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    parser.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    parser.add_argument(
        "--max-new-tokens", type=integer, default=200, help="tokens to generate (default: 200)"
    )
    parser.add_argument(
        "--temperature", type=finite_float, default=1.0, help="sampling temperature; 0 = greedy"
    )
    parser.add_argument("--top-k", type=integer, default=0, help="sample from the k best (0 = all)")
    parser.add_argument("--top-p", type=finite_float, default=1.0, help="nucleus sampling mass")
    parser.add_argument("--seed", type=seed, default=0, help="sampling seed (default: 0)")
    parser.add_argument(
        "--no-echo", action="store_true", help="print only the generated text, not the prompt"
    )
    parser.add_argument(
        "--ignore-eos", action="store_true", help="keep generating past the end-of-sequence token"
    )
    parser.add_argument(
        "--chat",
        action="store_true",
        help="--prompt is a user message: apply the model's chat template, print the reply",
    )
    parser.add_argument("--system", help="with --chat: a system message before the prompt")
    drafting.add_arguments(parser)
    add_precision_argument(parser)
    parser.add_argument(
        "--compile",
        nargs="?",
        const="on",
        choices=COMPILE_CHOICES,
        help="torch.compile the decode step on a static KV cache, with --precision's "
        "linears inside it (on the CPU inductor's C++ with frozen weights): the first "
        "token waits for the compile (a minute or more), and whether later ones are "
        "faster depends on the machine and precision. '--compile auto' times both steps "
        "on this machine once (the first run pays the compile) and keeps the faster",
    )
    add_device_argument(parser)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="attnkit",
        help="generate with attnkit (default) or llama.cpp (llama-cpp-python; Llama-type "
        "checkpoints, --precision fp32 or int8; the first use exports the checkpoint to "
        "GGUF into CHECKPOINT/engines/)",
    )


def check_arguments(args: argparse.Namespace) -> None:
    if args.max_new_tokens < 0:
        raise UsageError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    if not args.temperature >= 0:  # also refuses NaN
        raise UsageError(f"--temperature must be >= 0, got {args.temperature}")
    if args.top_k < 0:
        raise UsageError(f"--top-k must be >= 0, got {args.top_k}")
    if not 0 < args.top_p <= 1:
        raise UsageError(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.system is not None and not args.chat:
        raise UsageError("--system: only with --chat")
    drafting.check_arguments(args)


def chat_prompt(tokenizer: Tokenizer, user: str, system: str | None = None) -> str:
    """``user`` (after ``system``) in the tokenizer's chat template, ready for the reply."""
    from attnkit.data.chat import chat_template_of
    from attnkit.errors import DataError

    messages = [{"role": "system", "content": system}] if system is not None else []
    try:
        template = chat_template_of(tokenizer)
        return template.render([*messages, {"role": "user", "content": user}],
                               add_generation_prompt=True)  # fmt: skip
    except DataError as e:
        raise UsageError(f"--chat: {e}") from None


class IncrementalText:
    """The text of a growing list of token ids, in pieces, at a bounded cost per token.

    Decoding every id so far at each step (to keep BPE word boundaries and
    leading spaces right) costs time and memory growing with the text: with
    ``--max-new-tokens 10**12`` it never got far. Here only a short window is
    decoded (as vLLM's incremental detokenizer does): the ids since the last
    piece printed, after a few earlier ones for context, compared with the same
    window without the new ids. A piece that ends in half a character
    (``\ufffd``: a multi-byte character split across tokens) waits for the next
    token, for at most ``MAX_WAIT`` tokens.
    """

    CONTEXT = 5  # earlier ids decoded with the new ones (boundaries, leading spaces)
    MAX_WAIT = 16

    def __init__(self, tokenizer: Tokenizer, prompt: list[int]) -> None:
        self.tokenizer = tokenizer
        self.ids = list(prompt[-self.CONTEXT - 1 :])
        self.read = len(self.ids)  # ids before this have been printed
        self.prefix = max(self.read - self.CONTEXT, 0)  # the window starts here

    def add(self, token: int) -> str:
        """Take one new id; the text it completes (maybe empty)."""
        self.ids.append(token)
        before = self.tokenizer.decode(self.ids[self.prefix : self.read])
        after = self.tokenizer.decode(self.ids[self.prefix :])
        waiting = len(self.ids) - self.read
        if after.endswith("\ufffd") and waiting < self.MAX_WAIT:
            return ""
        return self._advance(before, after)

    def finish(self) -> str:
        """The text of ids still waiting for the rest of a character."""
        if len(self.ids) == self.read:
            return ""
        before = self.tokenizer.decode(self.ids[self.prefix : self.read])
        return self._advance(before, self.tokenizer.decode(self.ids[self.prefix :]))

    def _advance(self, before: str, after: str) -> str:
        piece = after[len(before) :] if after.startswith(before) else ""
        self.prefix, self.read = self.read, len(self.ids)
        del self.ids[: self.prefix]  # keep only the window
        self.read -= self.prefix
        self.prefix = 0
        return piece


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    if args.engine != "attnkit":
        return _run_engine(args)
    import torch

    from attnkit.cli.common import load_for
    from attnkit.cli.inference_args import plan_for
    from attnkit.decoding.generate import stream
    from attnkit.inference import prepare

    loaded = load_for("generate", args.checkpoint, getattr(args, "device", None))
    model, tokenizer = loaded.model, loaded.tokenizer
    prompt = _prompt_ids(args, tokenizer)
    # one sequence: one row per product; int8 calibrates on text through the tokenizer
    # (CPU: the model's own cache; GPU: the static cache); --compile auto times the step
    # at this run's length
    plan = plan_for(loaded, args, "generate", rows=1, calibrate=True,
                    positions=len(prompt) + args.max_new_tokens)  # fmt: skip
    stepper = cast("AnyStepper", prepare(loaded, plan))
    device = next(model.parameters()).device
    prompt_ids = torch.tensor([prompt], dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    eos_id = None if args.ignore_eos else model.eos_id
    if drafting.wanted(args):
        from attnkit.decoding.speculative import Sampling

        sampling = Sampling(args.temperature, args.top_k, args.top_p, generator)
        drafting.run(args, loaded, stepper, prompt_ids, sampling, eos_id,
                     lambda tokens: _print(args, tokenizer, prompt, tokens))  # fmt: skip
        return 0
    tokens = stream(
        model,
        prompt_ids,
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        generator=generator,
        eos_id=eos_id,
        stepper=stepper,
    )
    _print(args, tokenizer, prompt, (int(t[0]) for t in tokens))
    return 0


def _prompt_ids(args: argparse.Namespace, tokenizer: Tokenizer) -> list[int]:
    text = chat_prompt(tokenizer, args.prompt, args.system) if args.chat else args.prompt
    prompt = tokenizer.encode(text)
    if not prompt:
        raise UsageError("--prompt must hold at least one token, got an empty prompt")
    return list(prompt)


def _print(
    args: argparse.Namespace, tokenizer: Tokenizer, prompt: list[int], tokens: Iterable[int]
) -> None:
    """The prompt (unless --no-echo or --chat), then each token's text as it comes."""
    out = sys.stdout
    if not args.no_echo and not args.chat:  # a chat prints the reply only
        out.write(args.prompt)
        out.flush()
    text_of = IncrementalText(tokenizer, prompt)
    for token in tokens:
        piece = text_of.add(token)
        if piece:
            out.write(piece)
            out.flush()
    out.write(text_of.finish() + "\n")
    out.flush()


def _run_engine(args: argparse.Namespace) -> int:
    """``--engine llama.cpp``: the checkpoint's tokenizer here, its GGUF export there."""
    import dataclasses

    from attnkit.cli.common import load_for
    from attnkit.cli.inference_args import engine_plan, run_options, say_for
    from attnkit.engines.registry import GENERATORS, SampleOptions, generator_side, open_generator
    from attnkit.inference import prepare

    plan = engine_plan(args, "generate", "causal_lm")
    run = run_options(plan)
    options = SampleOptions(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                            top_k=args.top_k, top_p=args.top_p, seed=args.seed)  # fmt: skip
    GENERATORS[args.engine].check(run)  # refused options first
    GENERATORS[args.engine].check_sample(options)
    tokenizer, eos_id = generator_side(args.checkpoint)
    if not args.ignore_eos:
        options = dataclasses.replace(options, eos_id=eos_id)
    prompt = _prompt_ids(args, tokenizer)

    def opener(plan: InferencePlan, load: Callable[[], LoadedModel]) -> object:
        return open_generator(
            plan.engine, args.checkpoint, run, len(prompt) + args.max_new_tokens,
            load=lambda directory: load(), say=say_for("generate"),
        )  # fmt: skip

    loader = lambda: load_for("generate", args.checkpoint, "cpu")  # noqa: E731 (on a cache miss)
    engine: Any = prepare(loader, plan, openers={args.engine: opener})
    try:
        _print(args, tokenizer, prompt, engine.stream(prompt, options))
    finally:
        engine.close()
    return 0
