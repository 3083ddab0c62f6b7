"""A toy Markov-chain stepper and a brute-force searcher, shared as fixtures.

Token ids: 0 = pad, 1 = bos, 2 = eos, 3.. = real tokens.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor

PAD, BOS, EOS = 0, 1, 2


@dataclass
class ToyState:
    bias: Tensor  # (B, V) per-sentence logit bias, from the source
    fed: Tensor  # (B, t) every token fed so far, following reorders
    steps: int = 0

    def reorder(self, indices: Tensor, *, group_size: int | None = None) -> ToyState:
        # Not in place: callers must use the returned object.
        return ToyState(
            self.bias.index_select(0, indices), self.fed.index_select(0, indices), self.steps
        )


class MarkovStepper:
    """Next-token logits = ``table[last token] + bias(source)``.

    ``bias`` sums ``src_table`` rows over the non-pad source tokens (zero
    without a ``src_table``), so sentences differ but padding does not matter.
    ``calls`` records the tokens of every ``step``; ``last_state`` the state.
    """

    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def __init__(self, table: Tensor, src_table: Tensor | None = None) -> None:
        self.table = table
        self.src_table = src_table
        self.calls: list[Tensor] = []
        self.last_state: ToyState | None = None

    def start(self, src_ids: Tensor, *, max_steps: int | None = None) -> ToyState:
        self.calls = []
        if self.src_table is None:
            bias = self.table.new_zeros(src_ids.size(0), self.table.size(1))
        else:
            rows = self.src_table[src_ids] * (src_ids != PAD)[:, :, None]
            bias = rows.sum(dim=1)
        return ToyState(bias, src_ids.new_zeros(src_ids.size(0), 0))

    def step(self, tokens: Tensor, state: ToyState) -> tuple[Tensor, ToyState]:
        assert tokens.shape == (state.bias.size(0),) and tokens.dtype == torch.long
        self.calls.append(tokens.clone())
        state.fed = torch.cat([state.fed, tokens[:, None]], dim=1)
        state.steps += 1
        self.last_state = state
        return self.table[tokens] + state.bias, state

    def log_probs(self, prev: int, bias: Tensor | None = None) -> Tensor:
        logits = self.table[prev] + (0 if bias is None else bias)
        return torch.log_softmax(logits.double(), dim=-1)


def random_table(vocab: int, seed: int, *, scale: float = 2.0, eos_bias: float = 0.0) -> Tensor:
    """Random logits ``(V, V)``; pad and bos can never be produced."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(vocab, vocab, generator=g) * scale
    table[:, EOS] += eos_bias
    table[:, [PAD, BOS]] = -math.inf
    return table


def table_from_probs(vocab: int, rows: dict[int, dict[int, float]]) -> Tensor:
    """Logits = log p; unlisted transitions get a tiny probability, pad/bos none."""
    table = torch.full((vocab, vocab), math.log(1e-6))
    for prev, probs in rows.items():
        for tok, p in probs.items():
            table[prev, tok] = math.log(p)
    table[:, [PAD, BOS]] = -math.inf
    return table


def brute_force(
    model: MarkovStepper, limit: int, *, alpha: float = 0.0, bias: Tensor | None = None
) -> list[tuple[list[int], float, float]]:
    """Every output of up to ``limit`` generated tokens, as (tokens, raw, rank), best first."""
    vocab = model.table.size(0)
    real = range(EOS + 1, vocab)
    out = []
    for n in range(limit + 1):
        for seq in itertools.product(real, repeat=n):
            path = [BOS, *seq] + ([EOS] if n < limit else [])
            raw = sum(float(model.log_probs(a, bias)[b]) for a, b in itertools.pairwise(path))
            scored = len(path) - 1
            out.append((list(seq), raw, raw / ((5 + scored) / 6) ** alpha))
    out.sort(key=lambda h: -h[2])
    return out


@pytest.fixture
def toy() -> type[MarkovStepper]:
    return MarkovStepper


@pytest.fixture
def tables():
    """Helpers: ``random(vocab, seed, ...)`` and ``from_probs(vocab, rows)``."""
    return SimpleNamespace(random=random_table, from_probs=table_from_probs)


@pytest.fixture
def brute():
    return brute_force


# -- a tiny random Transformer, for one integration test per search ----------------


@pytest.fixture
def tiny_transformer():
    """A tiny random ``EncoderDecoder`` in float64 and eval mode (vocab 24)."""
    models = pytest.importorskip("attnkit.models")
    config = models.TransformerConfig.from_preset(
        "small",
        d_model=32,
        num_heads=4,
        d_ff=64,
        num_encoder_layers=2,
        num_decoder_layers=2,
        src_vocab_size=24,
        tgt_vocab_size=24,
        dropout=0.0,
    )
    return models.EncoderDecoder(config).double().eval()


def rescore_transformer(model, src: Tensor, tokens: list[int], limit: int) -> tuple[float, Tensor]:
    """Teacher-forced sum of log-probs of one output (EOS added unless cut at ``limit``).

    Returns the score and the log-probs ``(T, V)`` at each position.
    """
    targets = tokens + ([model.eos_id] if len(tokens) < limit else [])
    tgt_in = torch.tensor([[model.bos_id, *targets[:-1]]])
    with torch.no_grad():
        logp = torch.log_softmax(model(src[None], tgt_in).logits[0], dim=-1)
    return float(logp.gather(1, torch.tensor(targets)[:, None]).sum()), logp


@pytest.fixture
def rescore():
    return rescore_transformer
