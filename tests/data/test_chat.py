"""Chat templates rendered as transformers' apply_chat_template renders them."""

from __future__ import annotations

import pytest

from attnkit.data.chat import ChatTemplate, chat_template_of, check_messages
from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import DataError

# SmolLM2-135M-Instruct's template, as its GGUF file carries it.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CHAT = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
]


def chatml_tokenizer(template: str | None = SMOLLM2_TEMPLATE) -> PretrainedTokenizer:
    """A small byte-level BPE with ChatML's special tokens (ids 0, 1, 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["What is the capital of France? Paris. user assistant"], trainer)
    return PretrainedTokenizer.with_special_skipped(
        tok, pad_id=0, bos_id=1, eos_id=2, unk_id=None, chat_template=template
    )


@pytest.mark.parametrize("generation", [False, True])
def test_smollm2_template_renders_as_transformers(generation):
    transformers = pytest.importorskip("transformers")
    tokenizer = chatml_tokenizer()
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.hf_tokenizer, chat_template=SMOLLM2_TEMPLATE
    )
    expected = hf.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=generation)
    got = chat_template_of(tokenizer).render(CHAT, add_generation_prompt=generation)
    assert got == expected
    assert got.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert got.endswith("<|im_start|>assistant\n") == generation


def test_template_sees_special_tokens_and_may_raise():
    template = ChatTemplate(
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'tool' %}"
        "{{ raise_exception('no tools here') }}{% endif %}{{ m['content'] | tojson }}"
        "{% endfor %}{{ eos_token }}",
        bos_token="<s>",
        eos_token="</s>",
    )
    assert template.render([{"role": "user", "content": "é<b>"}]) == '<s>"é<b>"</s>'
    with pytest.raises(DataError, match="chat template: no tools here"):
        template.render([{"role": "tool", "content": "x"}])


def test_a_template_cannot_reach_python_internals():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(DataError, match="chat template: "):
        template.render(CHAT)


def test_missing_template_and_bad_messages_are_named():
    with pytest.raises(DataError, match="has no chat template; give prompt/completion records"):
        chat_template_of(chatml_tokenizer(template=None))
    with pytest.raises(DataError, match="not a valid Jinja template"):
        ChatTemplate("{% for %}")
    with pytest.raises(DataError, match=r"messages\[1\].content: expected a string, a int"):
        check_messages([{"role": "user", "content": "a"}, {"role": "assistant", "content": 3}])
    with pytest.raises(DataError, match=r"messages\[0\].role: expected a string, missing"):
        check_messages([{"content": "a"}])
    with pytest.raises(DataError, match="expected a non-empty list"):
        check_messages([])
