"""Attention heatmaps: rows are target tokens, columns are source tokens."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torch import Tensor

from attnkit.data.tokenizers import Tokenizer
from attnkit.models.encoder_only import EncoderOnlyModel
from attnkit.models.protocols import LanguageModel, Seq2SeqModel
from attnkit.visualize.figures import pyplot, save_figure


def select_heads(weights: Sequence[Tensor], *, layer: int = -1, head: int | None = None) -> Tensor:
    """Pick one map from per-layer weights ``(B, h, T, S)``: one head, or the heads' mean.

    Returns ``(B, T, S)``.
    """
    w = weights[layer]
    if head is None:
        return w.mean(dim=1)
    if not -w.size(1) <= head < w.size(1):
        raise ValueError(f"head: {head} is out of range for {w.size(1)} heads")
    return w[:, head]


def plot_attention(
    weights: Tensor,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    path: str | Path,
    *,
    title: str = "",
) -> Path:
    """Draw one ``(T, S)`` map to ``path`` (PNG) with token labels on both axes."""
    w = weights.detach().float().cpu().numpy()[: len(tgt_tokens), : len(src_tokens)]
    width = max(5.5, 0.45 * len(src_tokens) + 2)
    height = max(3.0, 0.4 * len(tgt_tokens) + 1.5)
    fig, ax = pyplot().subplots(figsize=(width, height))
    im = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=max(float(w.max()), 1e-6), aspect="auto")
    ax.set_xticks(range(len(src_tokens)), labels=list(src_tokens), rotation=60, ha="right")
    ax.set_yticks(range(len(tgt_tokens)), labels=list(tgt_tokens))
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if title:
        ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return save_figure(fig, path)


def attention_for_translation(
    model: Seq2SeqModel,
    tokenizer: Tokenizer,
    text: str,
    *,
    layer: int = -1,
    head: int | None = None,
    beam: int = 4,
) -> tuple[Tensor, list[str], list[str]]:
    """Translate ``text``, then return the cross-attention behind that translation.

    The output is decoded first, then scored once more with teacher forcing
    and ``need_weights=True``, so the map shows, for every output token, where
    the model looked while predicting it. Returns ``(weights (T, S), source
    tokens, output tokens)``, EOS included on both sides.
    """
    import torch

    from attnkit.decoding.text import decode_ids
    from attnkit.inference import plan_for_model, stepper

    model.eval()
    device = next(model.parameters()).device
    src = tokenizer.encode(text)[: model.config.max_len - 1] + [tokenizer.eos_id]
    plan = plan_for_model(model)  # the model's weights as they are, on its device
    out = decode_ids(stepper(model, plan), [src], beam=beam, max_len=model.config.max_len - 2,
                     device=device, search=plan.search)  # fmt: skip
    hyp = out[0].tokens[0] + [tokenizer.eos_id]
    with torch.no_grad():
        result = model(
            torch.tensor([src], device=device),
            torch.tensor([[tokenizer.bos_id, *hyp[:-1]]], device=device),
            need_weights=True,
        )
    weights = select_heads(result.cross_attentions, layer=layer, head=head)[0]
    return weights, token_strings(tokenizer, src), token_strings(tokenizer, hyp)


def attention_for_text(
    model: LanguageModel,
    tokenizer: Tokenizer,
    text: str,
    *,
    layer: int = -1,
    head: int | None = None,
) -> tuple[Tensor, list[str], list[str]]:
    """The self-attention of a language model (decoder-only or encoder-only) over ``text``.

    Returns ``(weights (T, T), tokens, tokens)``: row ``i`` is where token
    ``i`` looked (a causal model only looks back). The text is cut to the
    model's context.
    """
    import torch

    model.eval()
    device = next(model.parameters()).device
    ids = tokenizer.encode(text)[: model.config.max_len]
    if not ids:
        raise ValueError("text: holds no token")
    with torch.no_grad():
        result = model(torch.tensor([ids], device=device), need_weights=True)
    weights = select_heads(result.attentions, layer=layer, head=head)[0]
    labels = token_strings(tokenizer, ids)
    return weights, labels, labels


def attention_for_classifier(
    model: EncoderOnlyModel,
    tokenizer: Tokenizer,
    text: str,
    *,
    layer: int = -1,
    head: int | None = None,
) -> tuple[Tensor, list[str], Tensor]:
    """The self-attention of a text classifier over ``[CLS] text [SEP]`` (a ``text_a<TAB>text_b``
    pair: ``[CLS] a [SEP] b [SEP]``, with token types), as it is classified.

    Returns ``(weights (T, T), tokens, label probabilities (K,))``; the text is
    cut to the model's positions.
    """
    import torch

    from attnkit.data.classification import split_input_line
    from attnkit.evaluation.text_classification import encode_texts

    model.eval()
    device = next(model.parameters()).device
    first, second = split_input_line(text, "text")
    encoded = encode_texts(tokenizer, [first], None if second is None else [second],
                           model.config.max_len)  # fmt: skip
    ids = torch.tensor(encoded.ids, device=device)
    types = torch.tensor(encoded.types, device=device) if model.config.type_vocab_size else None
    with torch.no_grad():
        result = model(ids, need_weights=True, mlm=False, token_types=types)
    weights = select_heads(result.attentions, layer=layer, head=head)[0]
    probs = result.class_logits[0].float().softmax(-1).cpu()
    return weights, token_strings(tokenizer, encoded.ids[0]), probs


def token_strings(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Readable labels for token ids (subword pieces as the tokenizer shows them)."""
    specials = {tokenizer.eos_id: "</s>", tokenizer.bos_id: "<s>", tokenizer.pad_id: "<pad>"}
    return [specials.get(i) or tokenizer.id_to_token(i) for i in ids]
