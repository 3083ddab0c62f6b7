"""`attnkit generate --prompt-lookup K` and `--draft CKPT`: speculative decoding's side
of the command (no command of its own).

Both drafters go through one verification loop
(``attnkit.decoding.speculative``): greedy prints plain greedy's text, sampling
draws from plain sampling's distribution. With ``--debug``, stderr gets one
line of counts: tokens per model pass, draft tokens accepted per verifying
pass, tokens/s, and plain decoding's rate on the same number of tokens (timed
after, for the speed-up).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from attnkit.cli.argtypes import integer
from attnkit.errors import UsageError

if TYPE_CHECKING:
    from torch import Tensor

    from attnkit.checkpoints.loading import LoadedModel
    from attnkit.data.tokenizers import Tokenizer
    from attnkit.decoding.protocol import AnyStepper, Drafter
    from attnkit.decoding.speculative import Sampling, SpeculativeStats

DEFAULT_DRAFT_TOKENS = 4

Printer = Callable[[Iterable[int]], None]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prompt-lookup",
        type=integer,
        default=0,
        metavar="K",
        help="draft up to K tokens per step from earlier text (prompt-lookup speculative "
        "decoding: greedy prints the same text, sampling draws from the same distribution; "
        "faster on replies that copy; 0 = off)",
    )
    parser.add_argument(
        "--draft",
        metavar="CKPT",
        help="a small decoder-only checkpoint with the same tokenizer drafts tokens that "
        "the model checks in one pass (speculative decoding: the same text or distribution)",
    )
    parser.add_argument(
        "--draft-tokens",
        type=integer,
        metavar="K",
        help=f"with --draft: tokens drafted per step (default: {DEFAULT_DRAFT_TOKENS})",
    )


def check_arguments(args: argparse.Namespace) -> None:
    if args.prompt_lookup < 0:
        raise UsageError(f"--prompt-lookup must be >= 0, got {args.prompt_lookup}")
    if args.draft_tokens is not None and args.draft is None:
        raise UsageError("--draft-tokens: only with --draft")
    if args.draft_tokens is not None and args.draft_tokens < 1:
        raise UsageError(f"--draft-tokens must be >= 1, got {args.draft_tokens}")
    if args.draft is not None and args.prompt_lookup:
        raise UsageError("--draft and --prompt-lookup: one drafter at a time, choose one")
    for name, on in (("--prompt-lookup", args.prompt_lookup), ("--draft", args.draft)):
        if on and args.engine != "attnkit":
            raise UsageError(f"{name}: attnkit's own decoding only, not --engine {args.engine}")


def wanted(args: argparse.Namespace) -> bool:
    """Whether ``args`` ask for speculative decoding."""
    return bool(args.prompt_lookup) or args.draft is not None


def run(
    args: argparse.Namespace,
    loaded: LoadedModel,
    stepper: AnyStepper,
    prompt_ids: Tensor,
    sampling: Sampling,
    eos_id: int | None,
    print_tokens: Printer,
) -> None:
    """Decode with the drafter ``args`` name; ``--debug``: the counts and the speed-up."""
    from attnkit.decoding.speculative import SpeculativeStats, speculative_stream

    drafter, k, label = _drafter(args, loaded, sampling)
    stats = SpeculativeStats()
    began = time.perf_counter()
    tokens = speculative_stream(loaded.model, prompt_ids, args.max_new_tokens, drafter,
                                num_tokens=k, sampling=sampling, eos_id=eos_id,
                                stepper=stepper, stats=stats)  # fmt: skip
    print_tokens(_ints(tokens))
    seconds = time.perf_counter() - began
    if getattr(args, "debug", False) and stats.tokens:
        plain = _plain_rate(loaded.model, stepper, prompt_ids, stats.tokens, sampling)
        print(_stats_line(label, stats, drafter, stats.tokens / seconds, plain), file=sys.stderr)


def _ints(tokens: Iterator[Tensor]) -> Iterator[int]:
    return (int(t[0]) for t in tokens)


def _drafter(
    args: argparse.Namespace, loaded: LoadedModel, sampling: Sampling
) -> tuple[Drafter, int, str]:
    """The drafter, its draft length and the stats line's label."""
    if args.prompt_lookup:
        from attnkit.decoding.lookup import NgramDrafter

        return NgramDrafter(), args.prompt_lookup, "prompt lookup"
    from attnkit.cli.common import named_checkpoint
    from attnkit.decoding.draft import ModelDrafter

    draft = load_draft(named_checkpoint(args.draft), loaded, args)
    k = DEFAULT_DRAFT_TOKENS if args.draft_tokens is None else args.draft_tokens
    return ModelDrafter(draft.model, sampling=sampling, stepper=draft.stepper), k, "draft model"


class PreparedDraft(NamedTuple):
    """The draft model (what verifies several tokens) and what steps it."""

    model: Any
    stepper: AnyStepper


def load_draft(path: str, target: LoadedModel, args: argparse.Namespace) -> PreparedDraft:
    """The ``--draft`` checkpoint, prepared as the target is (precision, device)."""
    from typing import cast

    from attnkit.checkpoints.loading import WrongFamilyError
    from attnkit.cli.common import load_for
    from attnkit.cli.inference_args import plan_for
    from attnkit.inference import prepare

    device = next(target.model.parameters()).device
    try:
        loaded = load_for("generate", path, str(device))
    except WrongFamilyError as e:
        raise UsageError(
            f"--draft {path}: a {e.family.kind} checkpoint; the draft must be a decoder-only "
            "language model (what attnkit generate reads)"
        ) from None
    mismatch = vocabulary_mismatch(target.tokenizer, loaded.tokenizer)
    if mismatch is None and loaded.config.vocab_size != target.config.vocab_size:
        mismatch = f"{loaded.config.vocab_size} vs {target.config.vocab_size} output ids"
    if mismatch is not None:
        raise UsageError(
            f"--draft {path}: its vocabulary differs from --checkpoint's ({mismatch}); the "
            "draft must share the model's tokenizer"
        )
    stepper = prepare(loaded, plan_for(loaded, args, "generate", rows=1, calibrate=True))
    return PreparedDraft(loaded.model, cast("AnyStepper", stepper))


def vocabulary_mismatch(a: Tokenizer | None, b: Tokenizer | None) -> str | None:
    """How ``b``'s vocabulary differs from ``a``'s (``None``: the same ids, pieces, specials)."""
    if a is None or b is None:
        return None if a is b else "one has no tokenizer"
    if a.vocab_size != b.vocab_size:
        return f"{b.vocab_size} vs {a.vocab_size} ids"
    for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
        if getattr(a, name) != getattr(b, name):
            return f"{name} {getattr(b, name)} vs {getattr(a, name)}"
    for i in range(a.vocab_size):
        if a.id_to_token(i) != b.id_to_token(i):
            return f"id {i} is {b.id_to_token(i)!r} vs {a.id_to_token(i)!r}"
    return None


def _plain_rate(
    model: Any, stepper: AnyStepper, prompt_ids: Tensor, n: int, sampling: Sampling
) -> float:
    """Plain decoding's tokens/s on ``n`` tokens after the same prompt (the baseline)."""
    from attnkit.decoding.generate import stream

    began = time.perf_counter()
    count = 0
    for _ in stream(model, prompt_ids, n, temperature=sampling.temperature, top_k=sampling.top_k,
                    top_p=sampling.top_p, stepper=stepper):  # fmt: skip
        count += 1
    return count / (time.perf_counter() - began)


def _stats_line(
    label: str, stats: SpeculativeStats, drafter: Drafter, rate: float, plain: float
) -> str:
    draft_passes = getattr(drafter, "forwards", None)
    drafts = f"; {draft_passes} draft-model passes" if draft_passes is not None else ""
    return (
        f"{label}: {stats.tokens} tokens in {stats.forwards} model passes "
        f"({stats.tokens_per_forward:.2f} tokens/pass; {stats.accepted_per_round:.2f} accepted "
        f"tokens/step, {stats.accepted} of {stats.drafted} drafted accepted{drafts}), "
        f"{rate:.1f} tokens/s; plain decoding {plain:.1f} tokens/s: speed-up {rate / plain:.2f}x"
    )
