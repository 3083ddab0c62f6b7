"""``attnkit export --to hf``: a directory that ``transformers`` loads without attnkit.

An encoder-decoder Transformer becomes a Marian model (below); an encoder with
a token-level head (``task: token_classification`` or ``question_answering``)
becomes ``BertForTokenClassification`` or ``BertForQuestionAnswering``
(``attnkit.interop.hf.bert_export``) with ``config.json``,
``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json`` and
``special_tokens_map.json``: ``AutoModelForTokenClassification`` /
``AutoModelForQuestionAnswering`` and ``AutoTokenizer`` load it, and
``attnkit import --from hf`` reads it back (labels included).

For the Marian export:

The directory holds::

    config.json, model.safetensors     MarianMTModel (``attnkit.interop.hf.marian``)
    generation_config.json             the search ``attnkit translate`` runs by default
    tokenizer.json, tokenizer_config.json, special_tokens_map.json
                                       PreTrainedTokenizerFast (``attnkit.interop.hf.tokenizer``)
    README.md                          the model card (``attnkit.interop.model_card``)

so that ``AutoModelForSeq2SeqLM.from_pretrained(DIR)``,
``AutoTokenizer.from_pretrained(DIR)`` and ``model.generate(**tokenizer(texts,
return_tensors="pt", padding=True))`` translate as ``attnkit translate`` does.

**The search, field by field** (``generation_config.json``):

* ``decoder_start_token_id`` = attnkit's BOS (attnkit targets start with
  ``<s>``; OPUS-MT models start from ``<pad>`` instead);
* ``early_stopping=True``: a sentence is done once ``num_beams`` hypotheses
  have ended, fairseq's rule, which attnkit's beam search follows (HF's
  default ``False`` keeps searching while its heuristic says a live beam
  might still win);
* ``forced_eos_token_id`` unset: HF would force ``</s>`` at ``max_length``,
  while attnkit cuts an over-long output as it is;
* ``max_length`` = the model's ``max_len`` positions (start token included):
  attnkit's own limit is per sentence (source length + 50, ``--max-len-b``),
  which ``generate`` cannot express; only outputs longer than that differ;
* ``length_penalty``: HF ranks finished hypotheses by
  ``logprob / len ** length_penalty``; attnkit by GNMT's
  ``logprob / ((5 + len) / 6) ** alpha``. No value of ``length_penalty``
  gives GNMT's ranking, so beam outputs with ``alpha > 0`` may differ where
  hypotheses of different lengths score close; ``alpha = 0`` (raw sums) is
  the same search on both sides. ``length_penalty`` is written as attnkit's
  ``alpha``; ``docs/interop.md`` gives the measured agreement.

Greedy search (``num_beams=1``) is the same function on both sides.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from attnkit import jsonio
from attnkit.checkpoints import safe_files
from attnkit.checkpoints.loading import LoadedModel
from attnkit.errors import ConfigError, UsageError
from attnkit.interop.hf.bert_export import to_hf_bert
from attnkit.interop.hf.marian import check_marian_expressible, to_hf_marian
from attnkit.interop.hf.tokenizer import (
    encoder_tokenizer_config,
    encoder_tokenizer_json,
    hf_tokenizer_config,
    hf_tokenizer_json,
    remap_ids,
)
from attnkit.interop.model_card import RUN_FILE, model_card, run_config
from attnkit.interop.outdir import staged_directory

# attnkit translate's defaults (attnkit.cli.translate): beam 4, alpha 0.6.
DEFAULT_BEAM, DEFAULT_ALPHA = 4, 0.6


def _need_transformers() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UsageError(
            "export --to hf needs transformers: pip install 'attnkit[export]'"
        ) from None


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """No progress bars or advice from transformers while it saves or loads for us."""
    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def pad_last_order(vocab_size: int, pad_id: int) -> list[int]:
    """Old ids in their new order: every id but ``pad_id``, then ``pad_id`` (CTranslate2)."""
    return [i for i in range(vocab_size) if i != pad_id] + [pad_id]


def _permute_vocab(hf: Any, order: list[int]) -> Any:
    """A copy of the ``MarianMTModel`` ``hf`` whose vocabulary rows follow ``order``."""
    from transformers import MarianMTModel

    new_id = {old: new for new, old in enumerate(order)}
    config = hf.config.__class__.from_dict(hf.config.to_dict())
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        value = getattr(config, name, None)
        if value is not None:
            setattr(config, name, new_id[value])
    config.forced_eos_token_id = None
    index = torch.tensor(order)
    state = {}
    for key, value in hf.state_dict().items():
        if key.endswith(("embed_tokens.weight", "shared.weight", "lm_head.weight")):
            if value.size(0) != len(order):
                raise ConfigError(
                    f"src_vocab_size: source and target vocabularies differ in size "
                    f"({value.size(0)} vs {len(order)}); CTranslate2 needs one vocabulary"
                )
            value = value[index]
        elif key == "final_logits_bias":
            value = value[:, index]
        state[key] = value
    moved = MarianMTModel(config)
    moved.load_state_dict(state, strict=True)
    return moved.eval()


def build_hf_marian(loaded: LoadedModel, *, pad_last: bool = False) -> tuple[Any, dict[str, Any]]:
    """``(MarianMTModel, tokenizer.json dict)`` of ``loaded``; ``pad_last``: CTranslate2's order."""
    _need_transformers()
    check_marian_expressible(loaded.config)
    if loaded.tokenizer is None:
        raise ConfigError(f"{loaded.directory}: the checkpoint has no tokenizer.json to export")
    model = loaded.model.float().eval()
    hf = to_hf_marian(model, attn_implementation="eager").eval()
    tokenizer_json = hf_tokenizer_json(loaded.tokenizer)
    if pad_last:
        c = loaded.config
        if c.src_vocab_size != c.tgt_vocab_size:
            raise ConfigError(
                f"src_vocab_size: CTranslate2 needs one vocabulary; this model has "
                f"{c.src_vocab_size} source and {c.tgt_vocab_size} target ids"
            )
        order = pad_last_order(c.tgt_vocab_size, c.pad_id)
        hf = _permute_vocab(hf, order)
        new_id = {old: new for new, old in enumerate(order)}
        tokenizer_json = remap_ids(tokenizer_json, lambda i: new_id[i])
    return hf, tokenizer_json


def generation_settings(
    hf: Any, *, beam: int = DEFAULT_BEAM, alpha: float = DEFAULT_ALPHA
) -> dict[str, Any]:
    """``generation_config.json``'s fields (see the module doc for each choice)."""
    c = hf.config
    return {
        "decoder_start_token_id": c.decoder_start_token_id,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        "pad_token_id": c.pad_token_id,
        "forced_eos_token_id": None,
        "num_beams": beam,
        "length_penalty": alpha,
        "early_stopping": True,
        "max_length": c.max_position_embeddings,
        "do_sample": False,
    }


def write_hf_directory(
    directory: Path,
    hf: Any,
    tokenizer_json: dict[str, Any],
    loaded: LoadedModel,
    *,
    metrics: Path | None = None,
) -> None:
    """Write every file of the export into ``directory`` (which exists and is empty)."""
    from transformers import GenerationConfig

    hf.config.forced_eos_token_id = None
    hf.generation_config = GenerationConfig(**generation_settings(hf))
    with quiet_transformers():
        hf.save_pretrained(directory)
    text = jsonio.dumps(tokenizer_json, ensure_ascii=False)
    safe_files.write_text(directory / "tokenizer.json", text)
    config = hf_tokenizer_config(loaded.tokenizer, hf.config.max_position_embeddings)
    safe_files.write_json(directory / "tokenizer_config.json", config)
    specials = {k: config[k] for k in ("pad_token", "bos_token", "eos_token")}
    safe_files.write_json(directory / "special_tokens_map.json", specials)
    safe_files.write_text(directory / "README.md", model_card(loaded, hf, metrics=metrics))
    run = run_config(loaded)
    if run is not None:
        safe_files.write_json(directory / RUN_FILE, run)


def export_hf(
    loaded: LoadedModel, out: Path, *, overwrite: bool = False, metrics: Path | None = None
) -> Path:
    """Write ``loaded`` to ``out`` as a Hugging Face model: an encoder-decoder Transformer
    as Marian, an encoder with a token-level head as BERT's (see the module doc).

    ``metrics``: a JSON file from ``attnkit evaluate --json`` for the model
    card (Marian only). Variants the target cannot express raise ``ConfigError``
    naming the field.
    """
    if getattr(loaded.config, "family", None) == "encoder_only":
        if metrics is not None:
            raise UsageError("--metrics: the model card is written for translation exports only")
        return export_hf_encoder(loaded, out, overwrite=overwrite)
    hf, tokenizer_json = build_hf_marian(loaded)
    with staged_directory(out, overwrite=overwrite) as tmp:
        write_hf_directory(tmp, hf, tokenizer_json, loaded, metrics=metrics)
    return Path(out)


def export_hf_encoder(loaded: LoadedModel, out: Path, *, overwrite: bool = False) -> Path:
    """Write ``loaded`` (an encoder with a token-level head) to ``out`` as BERT's task class."""
    _need_transformers()
    if loaded.tokenizer is None:
        raise ConfigError(f"{loaded.directory}: the checkpoint has no tokenizer.json to export")
    hf = to_hf_bert(loaded.model)
    tokenizer = loaded.tokenizer
    config = encoder_tokenizer_config(tokenizer, loaded.config.max_len)
    with staged_directory(out, overwrite=overwrite) as tmp:
        with quiet_transformers():
            hf.save_pretrained(tmp)
        text = jsonio.dumps(encoder_tokenizer_json(tokenizer), ensure_ascii=False)
        safe_files.write_text(tmp / "tokenizer.json", text)
        safe_files.write_json(tmp / "tokenizer_config.json", config)
        specials = {k: v for k, v in config.items() if k.endswith("_token")}
        safe_files.write_json(tmp / "special_tokens_map.json", specials)
        run = run_config(loaded)
        if run is not None:
            safe_files.write_json(tmp / RUN_FILE, run)
    return Path(out)
