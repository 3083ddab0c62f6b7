"""Chat templates rendered as transformers' apply_chat_template renders them."""

from __future__ import annotations

import pytest
from chat_helpers import CHAT, SMOLLM2_TEMPLATE, chatml_tokenizer

from attnkit.data.chat import ChatTemplate, chat_template_of, check_messages
from attnkit.errors import DataError


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
