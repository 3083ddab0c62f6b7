"""Answer questions from a context with an extractive QA checkpoint (``task: question_answering``).

One question: --question and --context; prints the answer (a span of the
context), or with --json ``{"answer", "score", "start", "end"}`` (``score``:
the span's probability; ``context[start:end]`` is the answer). Many: --input
FILE (or standard input), JSONL lines ``{"question", "context"}`` (an ``id``
is echoed back); prints one answer per line, or with --json one JSON object
per line. A context longer than the window is read in overlapping windows
(--max-len, --doc-stride) and the best span over them wins.

Examples:
  attnkit answer --checkpoint runs/squad --question "Who wrote it?" \\
      --context "The book was written by Ann Smith in 1901."
  attnkit answer --checkpoint runs/squad --input questions.jsonl --json
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, cast

from attnkit import jsonio
from attnkit.cli.argtypes import integer
from attnkit.cli.common import (
    add_device_argument,
    add_precision_argument,
    load_for,
    named_checkpoint,
)
from attnkit.errors import DataError, UsageError

if TYPE_CHECKING:
    from attnkit.checkpoints.loading import LoadedModel
    from attnkit.models.lm_config import EncoderOnlyConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint or run directory")
    parser.add_argument("--question", help="the question (with --context)")
    parser.add_argument("--context", help="the text that holds the answer (with --question)")
    parser.add_argument(
        "--input", help='JSONL file of {"question", "context"} lines (default: stdin)'
    )
    parser.add_argument("--json", action="store_true", help="JSON objects, not plain answers")
    parser.add_argument("--batch-size", type=integer, default=32, help="windows per batch")
    parser.add_argument(
        "--max-len", type=integer, help="tokens per window (default: 256 or the model's)"
    )
    parser.add_argument(
        "--doc-stride", type=integer, help="tokens shared by consecutive windows (128)"
    )
    parser.add_argument(
        "--max-answer-len", type=integer, default=30, help="longest answer, in tokens"
    )
    parser.add_argument(
        "--allow-no-answer",
        action="store_true",
        help="answer nothing when [CLS] scores best (models trained on SQuAD v2.0)",
    )
    add_precision_argument(parser)
    add_device_argument(parser)


def load_reader(command: str, path: str, device: str | None) -> LoadedModel:
    """An encoder-only checkpoint with a start/end head, for ``attnkit command``."""
    from attnkit.evaluation.question_answering import is_qa_config

    loaded = load_for(command, path, device)
    if not is_qa_config(loaded.config):
        raise UsageError(
            f"{path}: this encoder-only checkpoint has no question-answering head (a token "
            "head labelled start, end); fine-tune one with attnkit train --init CKPT and "
            "task: question_answering"
        )
    return loaded


def windows_for(
    config: EncoderOnlyConfig, max_len: int | None, stride: int | None
) -> tuple[int, int]:
    """``(window, stride)`` from the options, checked against the model (UsageError)."""
    from attnkit.data.qa_windows import check_stride, default_stride, default_windows
    from attnkit.errors import ConfigError

    window = default_windows(config.max_len)[0] if max_len is None else max_len
    if not 8 <= window <= config.max_len:
        raise UsageError(f"--max-len must be in [8, {config.max_len}], got {window}")
    stride = default_stride(window) if stride is None else stride
    try:
        check_stride(window, stride)
    except ConfigError as e:
        raise UsageError(str(e).replace("data.doc_stride", "--doc-stride")) from None
    return window, stride


def run(args: argparse.Namespace) -> int:
    from torch import nn

    from attnkit.cli.inference_args import plan_for
    from attnkit.data.squad import QAExample, read_questions
    from attnkit.evaluation.question_answering import predict_answers
    from attnkit.inference import prepare

    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once

    if (args.question is None) != (args.context is None):
        raise UsageError("--question and --context go together")
    if args.question is not None and args.input:
        raise UsageError("--input: not with --question/--context")
    if args.batch_size < 1 or args.max_answer_len < 1:
        raise UsageError("--batch-size and --max-answer-len must be >= 1")
    if args.question is not None:
        for name in ("question", "context"):
            if not getattr(args, name).strip():
                raise DataError(f"--{name}: empty text")
        examples = [QAExample("0", args.question, args.context, (), (), "--question")]
    else:
        examples = read_questions(args.input)
    loaded = load_reader("answer", args.checkpoint, args.device)
    window, stride = windows_for(loaded.config, args.max_len, args.doc_stride)
    model = cast(nn.Module, prepare(loaded, plan_for(loaded, args, "answer")))  # --precision
    if not examples:
        return 0
    answers = predict_answers(
        model, loaded.tokenizer, examples, max_len=window, stride=stride,
        batch_size=args.batch_size, max_answer_len=args.max_answer_len,
        allow_null=args.allow_no_answer,
    )  # fmt: skip
    for example, (best, *_) in zip(examples, answers):
        if not args.json:
            print(best.text)
            continue
        record: dict[str, object] = {"answer": best.text, "score": round(best.probability, 6),
                                  "start": best.start, "end": best.end}  # fmt: skip
        if args.question is None:
            record = {"id": example.id, **record}
        print(jsonio.dumps(record, ensure_ascii=False))
    return 0
