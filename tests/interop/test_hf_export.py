"""attnkit export --to hf: transformers alone loads the directory and translates as attnkit does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from interop_helpers import save_random_model, source_limit

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.data.tokenizers import CharTokenizer
from attnkit.inference import translate_texts

# Runs in a fresh interpreter where `import attnkit` fails: only transformers reads the export.
STANDALONE = r"""
import json, sys
sys.modules["attnkit"] = None
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
job = json.loads(sys.stdin.read())
tok = AutoTokenizer.from_pretrained(job["dir"])
model = AutoModelForSeq2SeqLM.from_pretrained(job["dir"]).eval()
result = {"ids": [tok(t).input_ids for t in job["texts"]], "class": type(tok).__name__,
          "generation": model.generation_config.to_dict(), "outputs": {}}
for name, kwargs in job["searches"].items():
    outs = []
    for text, limit in zip(job["texts"], job["limits"]):
        enc = tok([text], return_tensors="pt")
        with torch.no_grad():
            ids = model.generate(**enc, max_new_tokens=limit, **kwargs)
        outs.append(tok.decode(ids[0], skip_special_tokens=True))
    result["outputs"][name] = outs
print(json.dumps(result))
"""

# Literal specials, unseen characters. Not a blank line: attnkit translates one to a
# blank line without running the model, transformers decodes the lone </s>.
ODD = ["forty-two <s> </s> <pad>", "zwölf €€ straße", "x"]


def run_standalone(directory, texts, limits, searches) -> dict:
    job = {"dir": str(directory), "texts": texts, "limits": limits, "searches": searches}
    done = subprocess.run(
        [sys.executable, "-c", STANDALONE], input=json.dumps(job), capture_output=True,
        text=True, timeout=600, env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
                                     "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_export_writes_every_file(hf_export):
    names = {p.name for p in hf_export.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "README.md"} <= names  # fmt: skip
    assert not any(name.endswith((".bin", ".model", ".spm")) for name in names)
    tok_config = json.loads((hf_export / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (tok_config["pad_token"], tok_config["bos_token"], tok_config["eos_token"]) == (
        "<pad>", "<s>", "</s>")  # fmt: skip
    gen = json.loads((hf_export / "generation_config.json").read_text())
    assert gen["decoder_start_token_id"] == 1 and gen["eos_token_id"] == 2
    assert gen["pad_token_id"] == 0 and gen["num_beams"] == 4 and gen["early_stopping"] is True
    assert gen["length_penalty"] == 0.6 and gen["max_length"] == 128
    assert gen.get("forced_eos_token_id") is None


MAX_LEN_B = 6  # short outputs keep the test quick; the same limit on both sides


def check_parity(export_dir, checkpoint, texts) -> None:
    """Greedy and beam 4 with alpha 0 (= length_penalty 0): attnkit translate's lines exactly."""
    loaded = load_model(checkpoint, "cpu")
    model, tok = loaded.model, loaded.tokenizer
    limits = [source_limit(len(tok.encode(t)), MAX_LEN_B) for t in texts]
    searches = {"greedy": {"num_beams": 1}, "beam0": {"num_beams": 4, "length_penalty": 0.0},
                "default": {}}  # fmt: skip
    got = run_standalone(export_dir, texts, limits, searches)
    assert got["ids"] == [tok.encode(t) + [tok.eos_id] for t in texts]

    def ours(beam: int, alpha: float) -> list[str]:
        return translate_texts(model, tok, texts, beam=beam, alpha=alpha, max_len_b=MAX_LEN_B)

    assert got["outputs"]["greedy"] == ours(1, 0.0)
    assert got["outputs"]["beam0"] == ours(4, 0.0)
    # generation_config.json alone: beam 4 with HF's len**0.6 normalisation; attnkit uses
    # GNMT's penalty, so only most lines need to agree (docs/interop.md has the figures).
    same = sum(a == b for a, b in zip(got["outputs"]["default"], ours(4, 0.6)))
    assert same >= len(texts) // 2, (same, len(texts))


def test_transformers_alone_translates_as_attnkit(hf_export, tiny_run, test_lines):
    check_parity(hf_export, tiny_run, test_lines[:6] + ODD)


def test_transformers_alone_translates_a_bpe_model_as_attnkit(bpe_checkpoint, tmp_path):
    out = tmp_path / "hf"
    assert (
        main(["export", "--checkpoint", str(bpe_checkpoint), "--to", "hf", "--out", str(out)]) == 0
    )
    texts = ["ein Haus am See", "zwei Hunde", "a dog runs fast by the lake", "Kinder <s> ß",
             "the house", "spielen im Garten schnell", ""]  # fmt: skip
    check_parity(out, bpe_checkpoint, texts)


def test_bpe_tokenizer_round_trips_through_transformers(bpe_checkpoint, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "hf"
    assert (
        main(["export", "--checkpoint", str(bpe_checkpoint), "--to", "hf", "--out", str(out)]) == 0
    )
    ours = load_model(bpe_checkpoint, "cpu").tokenizer
    theirs = AutoTokenizer.from_pretrained(out)
    for text in ["ein Haus am See", "Kinder <s> spielen </s>", "Üben ß 42 ☃", ""]:
        ids = theirs(text).input_ids
        assert ids == ours.encode(text) + [ours.eos_id]
        assert theirs.decode(ids, skip_special_tokens=True) == ours.decode(ids)


def test_model_card_says_what_is_known(hf_export, tiny_run, tmp_path):
    card = (hf_export / "README.md").read_text()
    assert "## Architecture" in card and "| d_model / heads / d_ff | 32 / 2 / 64 |" in card
    assert "attnkit train --config attnkit_run.json" in card and "training steps: 40" in card
    assert json.loads((hf_export / "attnkit_run.json").read_text())["task"] == "translation"
    assert "Test scores: unknown" in card and "GNMT" in card
    metrics = {"bleu": 12.34, "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|"
               "version:2.4.0", "chrf": 45.6, "chrf_signature": "nrefs:1|case:mixed|eff:yes|"
               "nc:6|nw:0|space:no|version:2.4.0", "sentences": 16,
               "decode": {"beam": 4, "alpha": 0.6}}  # fmt: skip
    path = tmp_path / "m.json"
    path.write_text(json.dumps(metrics))
    out = tmp_path / "hf"
    args = ["export", "--checkpoint", str(tiny_run), "--to", "hf", "--out", str(out)]
    assert main([*args, "--metrics", str(path)]) == 0
    card = (out / "README.md").read_text()
    assert "BLEU 12.34 (`nrefs:1|case:mixed" in card and "chrF 45.60" in card


@pytest.mark.parametrize(
    "field,value",
    [("norm_position", "pre"), ("positions", "learned"), ("norm", "rmsnorm"),
     ("activation", "swiglu"), ("num_kv_heads", 2), ("embedding_norm", True), ("key_dim", 4)],
)  # fmt: skip
def test_variants_marian_cannot_express_fail_naming_the_field(field, value, tmp_path, capsys):
    ckpt = save_random_model(tmp_path / "ck", CharTokenizer.train(["abc def"]), **{field: value})
    code = main(["export", "--checkpoint", str(ckpt), "--to", "hf", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"{field}:" in err, err
    assert not (tmp_path / "o").exists()
