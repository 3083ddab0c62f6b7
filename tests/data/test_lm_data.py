"""LM data (split, random blocks) and MLM masking statistics."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.lm import LMBlocks, load_lm_corpus, split_ids, train_lm_tokenizer
from attnkit.data.mlm import IGNORE_INDEX, mask_tokens, mlm_vocab
from attnkit.errors import DataError, UsageError

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 20


# -- language-model data -------------------------------------------------------------


def test_split_is_first_ninety_percent_then_the_rest():
    ids = torch.arange(1003)
    train, valid = split_ids(ids)
    assert train.numel() == 902 and valid.numel() == 101
    assert torch.equal(torch.cat([train, valid]), ids)
    train, valid = split_ids(ids, 0.25)
    assert (train[-1].item(), valid[0].item()) == (751, 752)
    assert split_ids(ids, 0.0)[1].numel() == 0
    with pytest.raises(UsageError, match="valid_fraction"):
        split_ids(ids, 1.0)


def test_corpus_from_a_text_file_round_trips(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    corpus = load_lm_corpus(path)
    tok = corpus.tokenizer
    assert tok.kind == "char"
    n = len(TEXT)
    assert corpus.train.numel() == int(n * 0.9) and corpus.valid.numel() == n - int(n * 0.9)
    assert tok.decode(corpus.train.tolist()) + tok.decode(corpus.valid.tolist()) == TEXT
    bpe = load_lm_corpus(path, kind="bpe", vocab_size=60)
    assert bpe.tokenizer.kind == "bpe" and bpe.train.numel() < corpus.train.numel()
    with pytest.raises(UsageError, match="vocab_size"):
        train_lm_tokenizer(TEXT, "bpe")


def test_blocks_are_shifted_by_one_and_reproducible():
    blocks = LMBlocks(torch.arange(100), 8)
    x, y = blocks.sample(16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (16, 8)
    assert torch.equal(y, x + 1)  # contiguous, and the targets are the next tokens
    assert torch.equal(x[:, 1:], x[:, :-1] + 1)
    assert 0 <= int(x[:, 0].min()) and int(y[:, -1].max()) <= 99

    def first(seed, n=3):
        it = blocks.batches(4, seed=seed)
        return [next(it)[0] for _ in range(n)]

    assert all(torch.equal(a, b) for a, b in zip(first(1), first(1)))
    assert not all(torch.equal(a, b) for a, b in zip(first(1), first(2)))


def test_every_offset_can_be_drawn():
    blocks = LMBlocks(torch.arange(12), 8)  # offsets 0..3
    x, _ = blocks.sample(400, torch.Generator().manual_seed(0))
    assert sorted(set(x[:, 0].tolist())) == [0, 1, 2, 3]


def test_sequential_blocks_do_not_overlap():
    blocks = LMBlocks(torch.arange(50), 8)
    xs = torch.cat([x for x, _ in blocks.sequential(2)])
    assert xs[:, 0].tolist() == [0, 8, 16, 24, 32, 40]
    assert int(xs.max()) == 47
    assert len(list(blocks.sequential(4, max_blocks=3))) == 1


def test_too_little_text_for_one_block_is_a_data_error():
    with pytest.raises(DataError, match="valid split: 8 tokens are too few"):
        LMBlocks(torch.arange(8), 8, name="valid split")
    with pytest.raises(UsageError, match="block_size"):
        LMBlocks(torch.arange(8), 0)


# -- masked-language-model corruption ------------------------------------------------

VOCAB, MASK = 105, 104
SPECIALS = (0, 1, 2, 3)


def corpus_ids() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, MASK, (64, 512), generator=g)
    ids[:, 0], ids[:, -1] = 1, 2  # BOS, EOS
    ids[::4, -100:-1] = 0  # padding
    return ids


def test_mask_statistics_follow_bert():
    ids = corpus_ids()
    inputs, labels = mask_tokens(
        ids, vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIALS,
        generator=torch.Generator().manual_seed(1),
    )  # fmt: skip
    eligible = ids >= 4
    selected = labels != IGNORE_INDEX
    rate = selected.sum() / eligible.sum()
    assert abs(float(rate) - 0.15) < 0.01
    n = int(selected.sum())  # about 4,600 selected tokens
    masked = int((inputs[selected] == MASK).sum())
    kept = int((inputs[selected] == ids[selected]).sum())
    replaced = n - masked - kept
    assert abs(masked / n - 0.8) < 0.025
    assert abs(kept / n - 0.1) < 0.02  # (+ ~1% random draws that hit the original)
    assert abs(replaced / n - 0.1) < 0.02
    # Specials are never selected, labels hold the originals where selected.
    assert not selected[~eligible].any()
    assert torch.equal(inputs[~selected], ids[~selected])
    assert torch.equal(labels[selected], ids[selected])
    # Random replacements are ordinary tokens, never a special or the mask.
    random_tokens = inputs[selected & (inputs != MASK) & (inputs != ids)]
    assert random_tokens.numel() and int(random_tokens.min()) >= 4
    assert int(random_tokens.max()) < MASK


def test_masking_is_reproducible_and_respects_prob():
    ids = corpus_ids()[:8]

    def run(seed, prob=0.15):
        g = torch.Generator().manual_seed(seed)
        return mask_tokens(ids, vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIALS,
                           prob=prob, generator=g)  # fmt: skip

    assert all(torch.equal(a, b) for a, b in zip(run(3), run(3)))
    assert not torch.equal(run(3)[1], run(4)[1])
    inputs, labels = run(0, prob=0.0)
    assert torch.equal(inputs, ids) and (labels == IGNORE_INDEX).all()
    assert (run(0, prob=1.0)[1][ids >= 4] != IGNORE_INDEX).all()
    with pytest.raises(UsageError, match="prob"):
        run(0, prob=1.5)
    with pytest.raises(UsageError, match="mask_id"):
        mask_tokens(ids, vocab_size=VOCAB, mask_id=VOCAB, special_ids=SPECIALS)


def test_mlm_vocab_adds_one_mask_id():
    tok = train_lm_tokenizer("abc")
    assert mlm_vocab(tok) == (tok.vocab_size + 1, tok.vocab_size)


def test_mlm_vocab_keeps_a_tokenizers_own_mask_token():
    pytest.importorskip("tokenizers")
    import tokenizers

    from attnkit.data.pretrained_tokenizer import PretrainedTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]
    hf = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")
    )
    tok = PretrainedTokenizer(hf, pad_id=0, bos_id=2, eos_id=3, unk_id=1, mask_id=4)
    assert mlm_vocab(tok) == (6, 4)  # no extra id: [MASK] is already there
