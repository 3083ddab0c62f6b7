"""BERT2BERT: an encoder-decoder warm-started from a (tiny, random) BERT-type encoder."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.checkpoints import save_checkpoint
from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import CheckpointError
from attnkit.models.encoder_decoder import EncoderDecoder
from attnkit.models.encoder_only import EncoderOnlyModel
from attnkit.models.lm_config import EncoderOnlyConfig
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import SummarizationTask, task_from_run
from attnkit.training.warm_start import load_warm_start as load_initial
from attnkit.training.warm_start_seq2seq import seq2seq_initial, seq2seq_state


def _bert(vocab: int = 40) -> tuple[EncoderOnlyConfig, EncoderOnlyModel]:
    torch.manual_seed(0)
    config = EncoderOnlyConfig(
        d_model=32, num_heads=4, d_ff=64, num_layers=2, vocab_size=vocab, max_len=64,
        norm_eps=1e-12, embedding_norm=True, scale_embeddings=False, type_vocab_size=2,
        num_labels=0, pooler=True, pad_id=0, bos_id=1, eos_id=2, mask_id=3, dropout=0.0,
    )  # fmt: skip
    model = EncoderOnlyModel(config).eval()
    with torch.no_grad():  # BERT's norms are trained: not ones and zeros
        for name, p in model.named_parameters():
            if "norm" in name or "token_types" in name:
                p.add_(0.1 * torch.randn_like(p))
    return config, model


def test_encoder_outputs_equal_the_berts_and_layers_are_copied():
    config, bert = _bert()
    seq_config, state = seq2seq_state(config, bert.state_dict(), seed=0)
    model = EncoderDecoder(seq_config).eval()
    model.load_state_dict(state, strict=True)
    assert (seq_config.activation, seq_config.norm_position, seq_config.positions) == (
        "gelu", "post", "learned")  # fmt: skip
    ids = torch.tensor([[1, 5, 9, 17, 2, 0, 0], [1, 7, 2, 30, 11, 12, 2]])
    with torch.no_grad():
        want = bert(ids).hidden
        got, _ = model.encode(ids)
    real = ids != 0
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)
    bert_state = bert.state_dict()
    for i in range(2):
        for part in ("self_attn.qkv_proj.weight", "self_attn.out_proj.bias", "ffn.w1.weight",
                     "self_attn_residual.norm.weight", "ffn_residual.norm.bias"):  # fmt: skip
            torch.testing.assert_close(state[f"decoder.layers.{i}.{part}"],
                                       bert_state[f"encoder.layers.{i}.{part}"])  # fmt: skip
        cross = state[f"decoder.layers.{i}.cross_attn.q_proj.weight"]
        fresh = EncoderDecoder(seq_config).state_dict()  # another draw: not what was saved
        assert cross.abs().sum() > 0
        assert not any(torch.equal(cross, v) for v in bert_state.values() if v.shape == cross.shape)
        assert not torch.equal(cross, fresh[f"decoder.layers.{i}.cross_attn.q_proj.weight"])
    assert model.output_proj.weight is model.src_embed.tokens.weight  # tied
    torch.testing.assert_close(model.output_proj.weight, bert_state["embed.tokens.weight"])


def test_the_cross_attention_is_seeded():
    config, bert = _bert()
    a = seq2seq_state(config, bert.state_dict(), seed=3)[1]
    b = seq2seq_state(config, bert.state_dict(), seed=3)[1]
    c = seq2seq_state(config, bert.state_dict(), seed=4)[1]
    name = "decoder.layers.1.cross_attn.kv_proj.weight"
    assert torch.equal(a[name], b[name]) and not torch.equal(a[name], c[name])


def test_an_encoder_that_is_not_berts_is_refused():
    config, bert = _bert()
    state = {k: v for k, v in bert.state_dict().items() if k != "embed.norm.weight"}
    with pytest.raises(CheckpointError, match="has no embed.norm.weight"):
        seq2seq_state(config, state)


def test_train_init_of_an_encoder_into_summarization(tmp_path):
    tok = CharTokenizer.train(["abcdefghij klmnop"])
    config, bert = _bert(vocab=tok.vocab_size + 1)
    config = config.replace(mask_id=tok.vocab_size)
    save_checkpoint(tmp_path / "bert", model_state=bert.state_dict(), config=config.to_dict(),
                    tokenizer_json=tok.to_json())  # fmt: skip
    rows = [{"text": "abc def ghi", "summary": "abc"}, {"text": "klm nop", "summary": "nop"}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = RunConfig.from_dict({
        "task": "summarization",
        "data": {"dir": str(tmp_path), "train": "train.jsonl", "valid": None, "max_len": 32},
        "train": {"max_steps": 1},
    })  # fmt: skip
    initial = load_initial(tmp_path / "bert")
    task = task_from_run(run, None, initial)
    assert isinstance(task, SummarizationTask)
    assert task.model_config.family == "transformer"
    assert task.model_config.num_decoder_layers == 2
    assert "warm-started from the encoder" in task.describe()
    model = task.build_model()
    want = seq2seq_initial(initial, seed=run.train.seed).state
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, want[name])
