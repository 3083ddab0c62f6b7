"""Invariances of the encoder-decoder: masks, padding, batching, cache vs no cache."""

import pytest
import torch

from attnkit.models import EncoderDecoder, TransformerConfig

V = 40


def _model(**overrides) -> EncoderDecoder:
    cfg = dict(
        d_model=32,
        num_heads=4,
        d_ff=64,
        num_encoder_layers=2,
        num_decoder_layers=2,
        src_vocab_size=V,
        tgt_vocab_size=V,
        dropout=0.0,
    )
    cfg.update(overrides)
    return EncoderDecoder(TransformerConfig(**cfg)).double().eval()


def _ids(b, t, *, bos=False):
    ids = torch.randint(3, V, (b, t))
    if bos:
        ids[:, 0] = 1
    return ids


VARIANTS = [
    {},
    {"norm_position": "pre"},
    {"positions": "learned", "share_embeddings": "none"},
    {"activation": "gelu", "share_embeddings": "decoder"},
]


@pytest.mark.parametrize("overrides", VARIANTS)
def test_future_target_tokens_never_change_earlier_logits(overrides):
    m = _model(**overrides)
    src, tgt = _ids(2, 7), _ids(2, 6, bos=True)
    changed = tgt.clone()
    changed[:, 4:] = _ids(2, 2)
    a, b = m(src, tgt).logits, m(src, changed).logits
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("overrides", VARIANTS)
def test_appending_padding_never_changes_real_logits(overrides):
    m = _model(**overrides)
    src, tgt = _ids(2, 7), _ids(2, 5, bos=True)
    base = m(src, tgt).logits
    pad_src = torch.cat([src, torch.zeros(2, 3, dtype=torch.long)], 1)
    pad_tgt = torch.cat([tgt, torch.zeros(2, 4, dtype=torch.long)], 1)
    for need_weights in (False, True):
        out = m(pad_src, pad_tgt, need_weights=need_weights).logits
        torch.testing.assert_close(out[:, :5], base)


def test_sentence_alone_equals_sentence_in_padded_batch():
    m = _model()
    src_a, tgt_a = _ids(1, 4), _ids(1, 3, bos=True)
    src_b, tgt_b = _ids(1, 9), _ids(1, 8, bos=True)
    src = torch.zeros(2, 9, dtype=torch.long)
    tgt = torch.zeros(2, 8, dtype=torch.long)
    src[0, :4], tgt[0, :3] = src_a, tgt_a
    src[1], tgt[1] = src_b, tgt_b
    batch = m(src, tgt).logits
    torch.testing.assert_close(batch[0, :3], m(src_a, tgt_a).logits[0])
    torch.testing.assert_close(batch[1], m(src_b, tgt_b).logits[0])


@pytest.mark.parametrize("overrides", VARIANTS)
def test_cached_decoding_equals_full_forward(overrides):
    m = _model(**overrides)
    src, tgt = _ids(3, 6), _ids(3, 7, bos=True)
    src[1, 4:] = 0  # padded source row
    full = m(src, tgt).logits
    state = m.start(src, max_steps=2)  # small capacity: exercises growth too
    steps = []
    for t in range(tgt.size(1)):
        logits, state = m.step(tgt[:, t], state)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), full)


def test_cached_chunk_prefill_equals_full_forward():
    m = _model()
    src, tgt = _ids(2, 5), _ids(2, 6, bos=True)
    full = m(src, tgt).logits
    state = m.start(src)
    last, state = m.step(tgt[:, :4], state)
    torch.testing.assert_close(last, full[:, 3])
    nxt, _ = m.step(tgt[:, 4], state)
    torch.testing.assert_close(nxt, full[:, 4])


def test_state_reorder_follows_beams():
    m = _model()
    src, tgt = _ids(3, 5), _ids(3, 4, bos=True)
    full = m(src, tgt).logits
    idx = torch.tensor([2, 0, 0, 1])
    state = m.start(src)
    _, state = m.step(tgt[:, :2], state)
    state = state.reorder(idx)
    logits, _ = m.step(tgt[idx, 2], state)
    torch.testing.assert_close(logits, full[idx, 2])


def test_weights_on_request_only_and_rows_sum_to_one():
    m = _model()
    src, tgt = _ids(2, 6), _ids(2, 5, bos=True)
    src[0, 4:] = 0
    out = m(src, tgt)
    assert out.cross_attentions is None and out.encoder_attentions is None
    out = m(src, tgt, need_weights=True)
    assert len(out.encoder_attentions) == 2 and len(out.cross_attentions) == 2
    cross = out.cross_attentions[0]
    assert cross.shape == (2, 4, 5, 6)
    torch.testing.assert_close(cross.sum(-1), torch.ones(2, 4, 5, dtype=cross.dtype))
    assert cross[0, :, :, 4:].abs().max() == 0  # never attends to source padding
    self_w = out.decoder_self_attentions[1]
    assert torch.triu(self_w, diagonal=1).abs().max() == 0  # never attends to the future


def test_tied_embeddings_share_one_matrix():
    m = _model(share_embeddings="all")
    assert m.output_proj.weight is m.src_embed.tokens.weight is m.tgt_embed.tokens.weight
    m = _model(share_embeddings="decoder")
    assert m.output_proj.weight is m.tgt_embed.tokens.weight
    assert m.src_embed.tokens.weight is not m.tgt_embed.tokens.weight
    m = _model(share_embeddings="none")
    assert m.output_proj.weight is not m.tgt_embed.tokens.weight


def test_embeddings_are_scaled_by_sqrt_d_model():
    m = _model()
    ids = torch.tensor([[5]])
    torch.testing.assert_close(
        m.src_embed.tokens(ids)[0, 0], m.src_embed.tokens.weight[5] * 32**0.5
    )


def test_beams_share_the_source_side_and_decode_as_if_they_did_not(monkeypatch):
    from attnkit.decoding import beam_search
    from attnkit.models import state as state_module

    m = _model()
    src = _ids(3, 6)
    src[1, 4:] = 0  # padding: the source mask is kept, once per sentence

    seen = []

    class Spy:
        pad_id, bos_id, eos_id = m.pad_id, m.bos_id, m.eos_id

        def start(self, src_ids, *, max_steps=None):
            return m.start(src_ids, max_steps=max_steps)

        def step(self, tokens, state):
            rows = state.memory_mask.allowed.size(0)
            seen.append((state.group, state.cache.cross_k.size(1), rows))
            return m.step(tokens, state)

    shared = beam_search(Spy(), src, beam_size=4, max_len=7)
    assert seen[0] == (1, 3, 3)  # the first step runs on the unexpanded rows
    assert seen[1] == (4, 3, 3) and seen[-1] == (4, 3, 3)  # 12 rows, 3 source rows
    monkeypatch.setattr(state_module, "_copies", lambda indices: 1)  # every row its own
    seen.clear()
    own = beam_search(Spy(), src, beam_size=4, max_len=7)
    assert seen[1] == (1, 12, 12)
    assert shared.tokens == own.tokens
    torch.testing.assert_close(torch.tensor(shared.scores), torch.tensor(own.scores))


def test_a_reorder_that_mixes_sentences_gives_rows_their_own_source():
    m = _model()
    src, tgt = _ids(2, 5), _ids(2, 3, bos=True)
    src[0, 3:] = 0
    full = m(src, tgt).logits
    state = m.start(src)
    state = state.reorder(torch.tensor([0, 0, 1, 1]))  # shared: two beams each
    assert state.group == 2 and state.cache.cross_k.size(1) == 2
    _, state = m.step(tgt[[0, 0, 1, 1], :2], state)
    idx = torch.tensor([3, 0])  # sentence 1's beam first, then sentence 0's
    state = state.reorder(idx)
    assert state.group == 1 and state.memory_mask.allowed.size(0) == 2
    logits, _ = m.step(tgt[[1, 0], 2], state)
    torch.testing.assert_close(logits, full[[1, 0], 2])


def test_no_source_mask_without_padding():
    m = _model()
    assert m.start(_ids(2, 5)).memory_mask is None
    padded = _ids(2, 5)
    padded[1, 4] = 0
    assert m.start(padded).memory_mask is not None
