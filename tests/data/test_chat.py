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


# Each renders in a child under a 2 GiB address-space limit, so a regression fails here
# (MemoryError, or a kill) instead of taking the machine's memory.
HUGE_TEMPLATES = [
    "{{ 'x' * 10**10 }}",  # 10 GB in one multiplication
    "{{ [0] * 10**9 }}",
    "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s }}",  # doubling: 2**40 characters
    "{% for i in range(100000) %}{% for j in range(1000) %}xxxxxxxxxx{% endfor %}"
    "{% endfor %}",  # 10**9 characters written
]


@pytest.mark.parametrize("source", HUGE_TEMPLATES)
def test_a_template_that_builds_gigabytes_is_refused_before_allocating(source):
    import os
    import resource
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys\n"
        "from attnkit.data.chat import ChatTemplate\n"
        "from attnkit.errors import DataError\n"
        "try:\n"
        "    ChatTemplate(sys.argv[1]).render([{'role': 'user', 'content': 'hi'}])\n"
        "except DataError as e:\n"
        "    print(e)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]), OMP_NUM_THREADS="1")
    limit = 2 << 30
    result = subprocess.run(
        [sys.executable, "-c", script, source], capture_output=True, text=True, env=env,
        timeout=300, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-500:]
    assert "chat template:" in result.stdout and "than the limit" in result.stdout, result.stdout
