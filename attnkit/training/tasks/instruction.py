"""The instruction-tuning task: a decoder-only LM learns to answer, on JSONL conversations.

Data (``attnkit.data.instructions``): ``{data.dir}/{data.train}``, one record
per line, ``{"messages": [...]}`` (the tokenizer's chat template) or
``{"prompt", "completion"}``; validation from ``{data.dir}/{data.valid}``,
or, with ``data.valid: null``, the last ``data.valid_fraction`` (default 0.1)
of the training records. Meant to start from a pretrained model (``attnkit
train --init CKPT``), whose tokenizer (and chat template) it uses; full
fine-tuning or LoRA (``train.lora``) alike.

Sequences are cut to ``data.block_size`` tokens (default: the model's
context). ``data.pack: true`` puts the records end to end and cuts blocks of
that length (no padding; attention then crosses record boundaries);
otherwise a batch pads its records to the longest. ``train.max_tokens //
block`` sequences per batch and rank, drawn at random from a seeded generator
saved for resume; under torchrun every rank draws the same global batch and
keeps its rows.

Objective: next-token cross-entropy summed over the answer tokens only (the
context and the padding are not targets); the trainer divides by their count.
Validation: mean loss per answer token (and its perplexity) over the first
``train.eval_blocks`` validation sequences.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.data.instructions import (
    IGNORE_INDEX,
    InstructionSet,
    Sequence,
    collate,
    pack,
    read_instructions,
)
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError, DataError
from attnkit.evaluation.perplexity import perplexity
from attnkit.models.decoder_only import CausalLMOutput
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import (
    LossSums,
    Task,
    TaskContext,
    TaskInputs,
    build_task_model,
    check_vocab_fits,
    context_block,
    model_config_from_run,
    saved_rng,
    with_moe_losses,
)
from attnkit.training.warm_start import WarmStart

Batch = tuple[Tensor, Tensor]


def answer_nll(
    model: nn.Module, inputs: Tensor, targets: Tensor
) -> tuple[Tensor, int, CausalLMOutput]:
    """Summed NLL of the answer tokens (``targets != IGNORE_INDEX``), their count, the output."""
    out: CausalLMOutput = model(inputs)
    logits = out.logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum",
                          ignore_index=IGNORE_INDEX)  # fmt: skip
    return nll, int((targets != IGNORE_INDEX).sum()), out


class InstructionTask:
    """Answer-only next-token loss of a ``DecoderOnlyLM`` on instruction records."""

    name: ClassVar[str] = "instruction"
    betas: ClassVar[tuple[float, float]] = (0.9, 0.99)
    eps: ClassVar[float] = 1e-8

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """The tokenizer is the pretrained model's (``--init``, or a resumed run's own)."""
        if given.tokenizer is None:
            raise ConfigError(
                "task: instruction fine-tunes a pretrained decoder-only model; start from one "
                "with --init CKPT (e.g. attnkit import --from gguf ... --out runs/smollm2)"
            )
        return cls(given.run, given.tokenizer, start=given.start)

    def __init__(
        self, run: RunConfig, tokenizer: Tokenizer, *, start: WarmStart | None = None
    ) -> None:
        self.run, self.cfg, self.tokenizer = run, run.train, tokenizer
        self.start = start  # --init: the pretrained model whose weights it starts from
        tok = tokenizer
        defaults = {"vocab_size": tok.vocab_size, "pad_id": tok.pad_id, "bos_id": tok.bos_id,
                    "eos_id": tok.eos_id}  # fmt: skip
        self.model_config: DecoderOnlyConfig = model_config_from_run(
            run, families=(DecoderOnlyConfig,), defaults=defaults, start=start
        )
        check_vocab_fits(self.model_config, ("vocab_size",), tok)
        data = run.data
        self.block = context_block(data.block_size, self.model_config.max_len)
        train = self.read_split("train")
        assert train is not None  # data.train is never null
        valid = self.read_split("valid")
        if valid is None:
            train, valid = _hold_out(train, data.held_out_fraction(run.task))
        self.train_set, self.valid_set = train, valid
        self.train_sequences = pack(train.sequences, self.block) if data.pack else train.sequences
        self.batch_size = max(1, self.cfg.max_tokens // self.block)
        self.batch_rng = torch.Generator().manual_seed(self.cfg.seed)
        self.context = TaskContext()

    def read_split(self, split: str) -> InstructionSet | None:
        """The examples of ``data.train``/``data.valid`` (``None``: not given), cut to the
        block; a subclass may read another format into the same ``InstructionSet``."""
        data = self.run.data
        name = data.one_file(split, self.run.task)
        if name is None:
            return None
        return read_instructions(Path(data.dir) / name, self.tokenizer, max_len=self.block)

    def setup(self, context: TaskContext) -> None:
        self.context = context

    def build_model(self) -> nn.Module:
        return build_task_model(self.model_config, self.start)

    def describe(self) -> str:
        t = self.train_set
        cut = f", {t.truncated} cut to {self.block} tokens" if t.truncated else ""
        dropped = f", {t.dropped} dropped (no answer token left)" if t.dropped else ""
        packed = f", packed into {len(self.train_sequences)} blocks" if self.run.data.pack else ""
        valid = len(self.valid_set.sequences) if self.valid_set is not None else 0
        return (
            f"{len(t.sequences)} training examples ({t.answer_tokens} answer tokens{cut}"
            f"{dropped}){packed}, {valid} validation examples, vocabulary "
            f"{self.tokenizer.vocab_size}, {self.batch_size} sequences of up to {self.block} "
            "tokens per batch"
        )

    def next_batch(self) -> tuple[Batch, bool]:
        dist = self.context.dist
        rows = torch.randint(len(self.train_sequences), (self.batch_size * dist.world_size,),
                             generator=self.batch_rng)  # fmt: skip
        mine = [self.train_sequences[int(rows[i])] for i in dist.shard(range(rows.numel()))]
        if not mine:  # a global batch smaller than the world: a stand-in row
            x, y = collate(self.train_sequences[:1], self.tokenizer.pad_id)
            return (x.to(self.context.device), y.to(self.context.device)), False
        x, y = collate(mine, self.tokenizer.pad_id)
        return (x.to(self.context.device), y.to(self.context.device)), True

    def loss(self, model: nn.Module, batch: Batch) -> LossSums:
        with self.context.precision():
            nll, count, out = answer_nll(model, *batch)
        return with_moe_losses(nll, nll.detach(), count, out.moe, self.model_config)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        if self.valid_set is None:
            return {}
        model.eval()
        sequences = self.valid_set.sequences[: self.cfg.eval_blocks]
        total, count = 0.0, 0
        for start in range(0, len(sequences), self.batch_size):
            x, y = collate(sequences[start : start + self.batch_size], self.tokenizer.pad_id)
            with self.context.precision():
                nll, n, _ = answer_nll(model, x.to(self.context.device), y.to(self.context.device))
            total, count = total + float(nll), count + n
        loss = total / max(count, 1)
        return {"loss": loss, "ppl": perplexity(total, max(count, 1))}

    def progress(self) -> dict[str, object]:
        return {}

    def state_dict(self) -> dict[str, object]:
        return {"batch_rng": self.batch_rng.get_state()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.batch_rng.set_state(saved_rng(state, "batch_rng"))


def _hold_out(
    data: InstructionSet, fraction: float
) -> tuple[InstructionSet, InstructionSet | None]:
    """The first ``1 - fraction`` of the examples and the rest (``None`` when 0)."""
    if fraction == 0.0:
        return data, None
    cut = int(len(data.sequences) * (1.0 - fraction))
    if cut < 1 or cut == len(data.sequences):
        raise DataError(
            f"{data.path}: {len(data.sequences)} examples are too few to hold out "
            f"data.valid_fraction={fraction}; give data.valid or more examples"
        )
    head: list[Sequence] = data.sequences[:cut]
    train = InstructionSet(head, data.truncated, data.dropped, data.path)
    return train, InstructionSet(data.sequences[cut:], path=data.path)
