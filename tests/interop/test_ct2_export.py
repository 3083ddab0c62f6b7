"""attnkit export --to ctranslate2: CTranslate2's converter, and the same translations."""

from __future__ import annotations

import json

import ctranslate2  # the dev extra; a missing package fails here, loudly
import pytest
from interop_helpers import source_limit

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.inference import translate_texts

MAX_LEN_B = 6


def ct2_translate(directory, texts, *, beam: int, alpha: float) -> list[str]:
    """One sentence at a time, each with attnkit's length limit (source + MAX_LEN_B)."""
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    translator = ctranslate2.Translator(str(directory), intra_threads=1)
    out = []
    for text in texts:
        pieces = tok.encode(text).tokens
        (result,) = translator.translate_batch(
            [pieces], beam_size=beam, length_penalty=alpha, min_decoding_length=0,
            max_decoding_length=source_limit(len(pieces), MAX_LEN_B),
        )  # fmt: skip
        out.append(tok.decode([tok.token_to_id(t) for t in result.hypotheses[0]]))
    return out


@pytest.mark.parametrize("which", ["tiny_run", "bpe_checkpoint"])
def test_ctranslate2_translates_as_attnkit(which, request, test_lines, tmp_path):
    checkpoint = request.getfixturevalue(which)
    out = tmp_path / "ct2"
    assert main(["export", "--checkpoint", str(checkpoint), "--to", "ctranslate2",
                 "--out", str(out)]) == 0  # fmt: skip
    config = json.loads((out / "config.json").read_text())
    assert config["decoder_start_token"] == "<s>" and config["add_source_eos"] is True
    vocab = json.loads((out / "shared_vocabulary.json").read_text())
    loaded = load_model(checkpoint, "cpu")
    assert "<pad>" not in vocab and len(vocab) == loaded.config.tgt_vocab_size - 1
    texts = (test_lines[:6] if which == "tiny_run" else ["ein Haus am See", "zwei Hunde",
             "a dog runs fast by the lake", "Kinder ß"])  # fmt: skip
    model, tok = loaded.model, loaded.tokenizer
    for beam in (1, 4):  # alpha 0: CTranslate2's length_penalty divides by len**alpha
        ours = translate_texts(model, tok, texts, beam=beam, alpha=0.0, max_len_b=MAX_LEN_B)
        assert ct2_translate(out, texts, beam=beam, alpha=0.0) == ours
    # An empty source gives an empty line in both, without running the model.
    assert ct2_translate(out, [""], beam=1, alpha=0.0) == [""]
    assert translate_texts(model, tok, [""], beam=1, alpha=0.0) == [""]


def test_ctranslate2_refuses_what_marian_cannot_express(tmp_path, capsys):
    from interop_helpers import save_random_model

    from attnkit.data.tokenizers import CharTokenizer

    ckpt = save_random_model(tmp_path / "ck", CharTokenizer.train(["abc"]), positions="learned")
    code = main(["export", "--checkpoint", str(ckpt), "--to", "ctranslate2",
                 "--out", str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "positions:" in err
