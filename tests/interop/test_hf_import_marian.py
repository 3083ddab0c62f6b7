"""attnkit -> HF Marian -> attnkit is bit-exact, and the imported run works in every command."""

from __future__ import annotations

import json

import pytest
import torch
from interop_helpers import save_random_model

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.inference import translate_texts
from attnkit.interop.hf.importer import import_hf
from attnkit.interop.hf.marian import to_hf_marian


def assert_same_model(a, b) -> None:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    assert a.config.to_dict() == b.config.to_dict()


@pytest.fixture(scope="module")
def round_trip(hf_export, tmp_path_factory):
    out = tmp_path_factory.mktemp("marian") / "run"
    assert main(["import", "--from", "hf", str(hf_export), "--out", str(out)]) == 0
    return out


def test_round_trip_is_bit_exact(tiny_run, round_trip, test_lines):
    a, b = load_model(tiny_run, "cpu"), load_model(round_trip, "cpu")
    assert_same_model(a, b)
    assert isinstance(b.tokenizer, PretrainedTokenizer)
    texts = test_lines[:6] + ["", "zwölf <s> ☃"]
    for text in texts:
        assert b.tokenizer.encode(text) == a.tokenizer.encode(text)
    for beam in (1, 4):
        kw = dict(beam=beam, max_len_b=8)
        assert translate_texts(b.model, b.tokenizer, texts, **kw) == translate_texts(
            a.model, a.tokenizer, texts, **kw
        )
    record = json.loads((round_trip / "import.json").read_text())
    assert record["model_type"] == "marian" and record["family"] == "transformer"


def test_bpe_round_trip_is_bit_exact(bpe_checkpoint, tmp_path):
    hf, run = tmp_path / "hf", tmp_path / "run"
    assert (
        main(["export", "--checkpoint", str(bpe_checkpoint), "--to", "hf", "--out", str(hf)]) == 0
    )
    import_hf(hf, run)
    assert_same_model(load_model(bpe_checkpoint, "cpu"), load_model(run, "cpu"))


def test_imported_run_works_in_every_command(round_trip, tiny_run, tmp_path, capsys):
    root = tiny_run.parent
    src = tmp_path / "in.txt"
    src.write_text("forty-two\none hundred\n", encoding="utf-8")
    args = ["--checkpoint", str(round_trip)]
    assert main(["translate", *args, "--input", str(src), "--greedy", "--max-len-b", "6"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["evaluate", *args, "--src", str(root / "test.en"), "--ref",
                 str(root / "test.de"), "--json", "--max-len-b", "6"]) == 0  # fmt: skip
    assert "bleu" in json.loads(capsys.readouterr().out)
    png = tmp_path / "a.png"
    assert main(["attention", *args, "--text", "forty-two", "--out", str(png)]) == 0
    assert png.is_file()
    assert main(["export", *args, "--to", "hf", "--out", str(tmp_path / "again")]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("share,src_vocab,tgt_vocab", [("decoder", 40, 40), ("none", 40, 40)])
def test_untied_and_unshared_embeddings_round_trip(share, src_vocab, tgt_vocab, tmp_path):
    from attnkit.data.tokenizers import CharTokenizer

    tok = CharTokenizer.train(["the quick brown fox jumps over the lazy dog"])
    ckpt = save_random_model(tmp_path / "ck", tok, share_embeddings=share,
                             src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab)  # fmt: skip
    hf, run = tmp_path / "hf", tmp_path / "run"
    assert main(["export", "--checkpoint", str(ckpt), "--to", "hf", "--out", str(hf)]) == 0
    import_hf(hf, run)
    assert_same_model(load_model(ckpt, "cpu"), load_model(run, "cpu"))


def test_a_transformers_marian_model_imports_with_equal_logits(tmp_path):
    """A Marian directory that transformers itself wrote (gelu, unscaled embeddings)."""
    from attnkit.data.tokenizers import CharTokenizer
    from attnkit.models import EncoderDecoder, TransformerConfig

    tok = CharTokenizer.train(["the quick brown fox jumps over the lazy dog"])
    cfg = TransformerConfig(d_model=32, num_heads=4, d_ff=48, num_encoder_layers=1,
                            num_decoder_layers=2, src_vocab_size=tok.vocab_size,
                            tgt_vocab_size=tok.vocab_size, activation="gelu",
                            scale_embeddings=False, max_len=40)  # fmt: skip
    model = EncoderDecoder(cfg).eval()
    hf = to_hf_marian(model).eval()
    with torch.no_grad():  # HF recomputes its sinusoid table on load: leave it alone
        for name, p in hf.named_parameters():
            if "embed_positions" not in name:
                p.add_(0.2 * torch.randn_like(p))
    hf.save_pretrained(tmp_path / "hf")
    from attnkit.interop.hf.tokenizer import hf_tokenizer_json

    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(hf_tokenizer_json(tok)))
    import_hf(tmp_path / "hf", tmp_path / "run")
    ours = load_model(tmp_path / "run", "cpu").model
    src = torch.randint(4, tok.vocab_size, (2, 7))
    tgt = torch.randint(4, tok.vocab_size, (2, 5))
    tgt[:, 0] = 1
    with torch.no_grad():
        theirs = hf(input_ids=src, decoder_input_ids=tgt).logits
        diff = (ours(src, tgt).logits - theirs).abs().max().item()
    assert diff <= 1e-5, diff
