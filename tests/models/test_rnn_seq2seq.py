"""RNN encoder-decoders: config, invariances, stepping = teacher forcing, searches, learning."""

import itertools
import json

import pytest
import torch
import torch.nn.functional as F

from attnkit.cli.main import main
from attnkit.data.synthetic import number_splits
from attnkit.decoding import beam_search, greedy_search, sample
from attnkit.errors import ConfigError
from attnkit.models import (
    EncoderDecoder,
    RNNSeq2Seq,
    RNNSeq2SeqConfig,
    TransformerConfig,
    build_model,
    config_from_dict,
)
from attnkit.visualize.attention import select_heads

V = 24
ATTENTIONS = ["none", "bahdanau", "luong_general", "luong_dot", "luong_location"]
# Every attention x cell x direction; LSTMs get two layers, and Luong's input
# feeding is on for bidirectional encoders, so both of its code paths run.
VARIANTS = [
    {
        "attention": attention,
        "cell": cell,
        "bidirectional": bi,
        "num_layers": 2 if cell == "lstm" else 1,
        "input_feeding": bi and attention.startswith("luong"),
    }
    for attention, cell, bi in itertools.product(ATTENTIONS, ["lstm", "gru"], [False, True])
]
IDS = ["{attention}-{cell}-{}".format("bi" if v["bidirectional"] else "uni", **v) for v in VARIANTS]


def _model(**overrides) -> RNNSeq2Seq:
    cfg = dict(embed_dim=8, hidden_size=12, src_vocab_size=V, tgt_vocab_size=V, dropout=0.0,
               max_src_len=16, max_len=64)  # fmt: skip
    cfg.update(overrides)
    return RNNSeq2Seq(RNNSeq2SeqConfig(**cfg)).double().eval()


def _ids(b, t, *, bos=False):
    ids = torch.randint(3, V, (b, t))
    if bos:
        ids[:, 0] = 1
    return ids


# -- config ------------------------------------------------------------------------

INVALID = [
    ("cell", {"cell": "rnn"}),
    ("attention", {"attention": "luong_concat"}),
    ("embed_dim", {"embed_dim": 0}),
    ("hidden_size", {"hidden_size": 2.0}),
    ("num_layers", {"num_layers": True}),
    ("bidirectional", {"bidirectional": 1}),
    ("dropout", {"dropout": 1.0}),
    ("input_feeding", {"input_feeding": True, "attention": "bahdanau"}),
    ("max_src_len", {"max_src_len": 0}),
    ("max_len", {"max_len": 0}),
    ("src_vocab_size", {"src_vocab_size": 2}),
    ("pad_id", {"pad_id": 1, "bos_id": 1}),
    ("eos_id", {"eos_id": -1}),
]


@pytest.mark.parametrize(("field", "values"), INVALID, ids=[f for f, _ in INVALID])
def test_every_invalid_field_raises_config_error_naming_it(field, values):
    with pytest.raises(ConfigError, match=rf"^{field}:"):
        RNNSeq2SeqConfig(**values)


def test_config_round_trips_through_json_and_presets():
    c = RNNSeq2SeqConfig.from_preset("luong", attention="luong_dot", hidden_size=64)
    assert c.cell == "lstm" and c.input_feeding and c.hidden_size == 64
    data = json.loads(c.to_json())
    assert data["family"] == "rnn"
    assert RNNSeq2SeqConfig.from_json(c.to_json()) == c
    big = RNNSeq2SeqConfig.from_preset("bahdanau")
    assert (big.embed_dim, big.hidden_size, big.cell, big.bidirectional) == (256, 512, "gru", True)
    assert big.encoder_dim == 1024 and big.d_model == 512
    with pytest.raises(ConfigError, match="^hiden_size: unknown key; did you mean 'hidden_size'"):
        RNNSeq2SeqConfig.from_dict({"hiden_size": 3})
    with pytest.raises(ConfigError, match="^preset:"):
        RNNSeq2SeqConfig.from_preset("huge")
    with pytest.raises(ConfigError, match="^family:"):
        RNNSeq2SeqConfig.from_dict(TransformerConfig().to_dict())


# -- every variant: shapes, padding, stepping ----------------------------------------


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_forward_shapes_and_attention_maps(variant):
    m = _model(**variant)
    src = _ids(3, 6)
    src[0, 4:] = 0
    out = m(src, _ids(3, 5, bos=True), need_weights=True)
    assert out.logits.shape == (3, 5, V) and out.hidden.shape == (3, 5, 12)
    if variant["attention"] == "none":
        assert out.cross_attentions is None
        return
    (w,) = out.cross_attentions
    assert w.shape == (3, 1, 5, 6)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 1, 5, dtype=torch.float64))
    assert w[0, :, :, 4:].abs().max() == 0  # no weight on source padding
    assert select_heads(out.cross_attentions).shape == (3, 5, 6)  # what the visualizer reads


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_padding_never_changes_real_logits(variant):
    m = _model(**variant)
    src_a, tgt_a = _ids(1, 4), _ids(1, 3, bos=True)
    src_b, tgt_b = _ids(1, 7), _ids(1, 6, bos=True)
    src = torch.zeros(2, 7, dtype=torch.long)
    tgt = torch.zeros(2, 6, dtype=torch.long)
    src[0, :4], tgt[0, :3] = src_a, tgt_a
    src[1], tgt[1] = src_b, tgt_b
    batch = m(src, tgt).logits
    torch.testing.assert_close(batch[0, :3], m(src_a, tgt_a).logits[0])
    torch.testing.assert_close(batch[1], m(src_b, tgt_b).logits[0])
    # Appending source padding (and target padding) changes nothing.
    more = m(F.pad(src, (0, 3)), F.pad(tgt, (0, 2)), need_weights=True).logits
    torch.testing.assert_close(more[:, :6], batch)


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_stepwise_decoding_equals_teacher_forcing(variant):
    m = _model(**variant)
    src, tgt = _ids(3, 6), _ids(3, 5, bos=True)
    src[1, 3:] = 0
    full = m(src, tgt).logits
    state = m.start(src)
    steps = [m.step(tgt[:, t], state)[0] for t in range(4)]
    steps.append(m.step(tgt[:, 4:5], state)[0])  # a (B, 1) feed works too
    torch.testing.assert_close(torch.stack(steps, dim=1), full)
    # Feeding several tokens at once gives the last one's logits.
    state = m.start(src)
    torch.testing.assert_close(m.step(tgt, state)[0], full[:, -1])


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_state_reorder_permutes_rows_exactly(attention):
    feeding = attention.startswith("luong")
    m = _model(attention=attention, cell="lstm", num_layers=2, input_feeding=feeding)
    src, tgt = _ids(3, 5), _ids(3, 3, bos=True)
    src[2, 2:] = 0
    state = m.start(src)
    for t in range(2):
        m.step(tgt[:, t], state)
    other = m.start(src)
    for t in range(2):
        m.step(tgt[:, t], other)
    perm = torch.tensor([2, 0, 1, 1])  # a permutation plus a duplicate, as beams do
    reordered = state.reorder(perm)
    assert reordered is state
    for name in ("memory", "keys", "src_mask", "context", "feed"):
        a, b = getattr(state, name), getattr(other, name)
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b[perm]), name
    for a, b in zip(state.hidden, other.hidden):
        assert torch.equal(a, b[:, perm])
    logits, _ = m.step(tgt[perm, 2], state)
    want, _ = m.step(tgt[:, 2], other)
    torch.testing.assert_close(logits, want[perm])


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_beam_one_is_greedy_and_sampling_runs(attention):
    m = _model(attention=attention, bidirectional=True)
    src = _ids(3, 6)
    src[0, 3:] = 0
    greedy = greedy_search(m, src, max_len=8)
    beam = beam_search(m, src, beam_size=1, max_len=8)
    assert beam.tokens == greedy.tokens
    assert beam.scores == pytest.approx(greedy.scores)
    wide = beam_search(m, src, beam_size=3, nbest=2, max_len=8)
    assert all(len(h) == 2 for h in wide.nbest)
    drawn = sample(m, src, max_len=8, generator=torch.Generator().manual_seed(0))
    assert len(drawn.tokens) == 3


def test_location_refuses_a_source_longer_than_its_slots():
    m = _model(attention="luong_location", max_src_len=4)
    with pytest.raises(ValueError, match="^max_src_len:"):
        m(_ids(1, 5), _ids(1, 2, bos=True))


# -- learning ----------------------------------------------------------------------


@pytest.mark.parametrize("attention", ["bahdanau", "none"])
def test_overfits_a_reversal_task(attention):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(3, 7, (8,), generator=g).tolist()
    seqs = [torch.randint(3, 14, (n,), generator=g) for n in lengths]
    src = torch.nn.utils.rnn.pad_sequence([F.pad(s, (0, 1), value=2) for s in seqs], True)
    tgt_in = torch.nn.utils.rnn.pad_sequence(
        [F.pad(s.flip(0), (1, 0), value=1) for s in seqs], True
    )
    tgt_out = torch.nn.utils.rnn.pad_sequence(
        [F.pad(s.flip(0), (0, 1), value=2) for s in seqs], True
    )
    m = RNNSeq2Seq(RNNSeq2SeqConfig(attention=attention, embed_dim=16, hidden_size=32,
                                    src_vocab_size=14, tgt_vocab_size=14, dropout=0.0))  # fmt: skip
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(200):
        loss = F.cross_entropy(m(src, tgt_in).logits.transpose(1, 2), tgt_out, ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
    out = greedy_search(m.eval(), src)
    assert out.tokens == [s.flip(0).tolist() for s in seqs]


# -- registry and the CLI ----------------------------------------------------------


def test_registry_builds_and_round_trips_both_families():
    rnn = RNNSeq2SeqConfig.from_preset("small", src_vocab_size=V, tgt_vocab_size=V)
    tf = TransformerConfig.from_preset("small", d_model=16, num_heads=2, d_ff=16,
                                       src_vocab_size=V, tgt_vocab_size=V)  # fmt: skip
    for config, cls in ((rnn, RNNSeq2Seq), (tf, EncoderDecoder)):
        data = json.loads(config.to_json())
        assert config_from_dict(data) == config
        model = build_model(config).eval()
        assert type(model) is cls
        again = build_model(config_from_dict(data)).eval()
        again.load_state_dict(model.state_dict())
        src, tgt = _ids(2, 4), _ids(2, 3, bos=True)
        torch.testing.assert_close(again(src, tgt).logits, model(src, tgt).logits)
    old = tf.to_dict()
    del old["family"]  # checkpoints written before families existed
    assert config_from_dict(old) == tf
    with pytest.raises(ConfigError, match="^family:"):
        config_from_dict({"family": "lstm"})


CONFIG = """
task: translation
data: {{dir: {dir}, src_lang: en, tgt_lang: de, train: train, valid: valid, max_len: 96}}
tokenizer: {{kind: char}}
model: {{family: rnn, preset: small, attention: luong_general, input_feeding: true,
        embed_dim: 16, hidden_size: 24, max_len: 128, max_src_len: 128}}
train: {{max_steps: 4, max_tokens: 800, warmup_steps: 2, log_every: 2, eval_every: 4,
        save_every: 4, valid_bleu_sentences: 2}}
"""


def test_cli_trains_and_translates_an_rnn(tmp_path, capsys):
    splits = number_splits(40, 4, 0, low=1, high=999, seed=0)
    for split, pairs in splits.items():
        (tmp_path / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs), "utf-8")
        (tmp_path / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs), "utf-8")
    config = tmp_path / "rnn.yaml"
    config.write_text(CONFIG.format(dir=tmp_path), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    saved = json.loads(next(out.glob("checkpoints/step_*/config.json")).read_text())
    assert saved["family"] == "rnn" and saved["attention"] == "luong_general"
    capsys.readouterr()
    src = tmp_path / "in.txt"
    src.write_text("one hundred\nforty-two\n", encoding="utf-8")
    for extra in (["--beam", "3"], ["--greedy"]):
        args = ["translate", "--checkpoint", str(out), "--input", str(src), "--max-len-b", "8"]
        assert main([*args, *extra]) == 0
        lines = capsys.readouterr().out.split("\n")
        assert len(lines) == 3 and lines[-1] == ""
    # The attention map of an RNN: one layer, one head.
    png = tmp_path / "map.png"
    argv = ["attention", "--checkpoint", str(out), "--text", "forty-two", "--out", str(png)]
    assert main(argv) == 0 and png.stat().st_size > 0
    assert main([*argv, "--head", "1"]) == 2
    assert "--head must be in [0, 0]" in capsys.readouterr().err
