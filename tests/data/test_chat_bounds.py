"""What a crafted chat template may build: every operator, filter and method is bounded.

Most cases run in-process under a small ceiling (10,000 characters), where an
unbounded template would build about a megabyte and the test would fail
without eating the machine; a few run at the real ceiling in a child under a
2 GiB address-space limit.
"""

from __future__ import annotations

import time

import pytest
from chat_helpers import CHAT, SMOLLM2_TEMPLATE

from attnkit.data import chat_bounds
from attnkit.data.chat import ChatTemplate
from attnkit.errors import DataError

SMALL = 10_000
S = "{% set s = 'x' * 5000 %}"  # half the small ceiling
DOUBLE = "{% set ns = namespace(s='x') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}"

# Each builds about 10**6 characters (or items) when nothing bounds it.
AMPLIFIERS = {
    "~ doubling in a loop": DOUBLE + "{% endfor %}{{ ns.s|length }}",
    "~ of one big string": S + "{{ (s ~ s ~ s)|length }}",
    "* on a string": "{{ ('x' * 10**6)|length }}",
    "* on a list of big strings": S + "{{ ([s] * 200)|length }}",
    "+ doubling a list": "{% set ns = namespace(l=['x']) %}{% for i in range(20) %}"
    "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}",
    "% with a width": "{{ ('%1000000d' % 1)|length }}",
    "% with a width argument": "{{ ('%*d' % (10**6, 1))|length }}",
    "% repeating an argument": S + "{{ ('%s' * 200 % ([s] * 1)|join)|length }}",
    "format() width": "{{ '{:>1000000}'.format(1)|length }}",
    "format() width argument": "{{ '{:>{}}'.format(1, 10**6)|length }}",
    "format filter": "{{ ('%1000000s'|format(1))|length }}",
    "ljust()": "{{ 'x'.ljust(10**6)|length }}",
    "zfill()": "{{ '1'.zfill(10**6)|length }}",
    "center filter": "{{ ('x'|center(10**6))|length }}",
    "expandtabs()": "{{ ('\t' * 1000).expandtabs(1000)|length }}",
    "replace filter": "{{ ('x' * 1000)|replace('x', 'x' * 1000)|length }}",
    "replace()": "{{ ('x' * 1000).replace('x', 'x' * 1000)|length }}",
    "indent filter": "{{ ('a\n' * 1000)|indent(1000)|length }}",
    "join filter": S + "{{ ([s, s, s]|join)|length }}",
    "join()": S + "{{ ''.join([s, s, s])|length }}",
    "tojson indent": "{{ (range(1000)|list|tojson(indent=1000))|length }}",
    "wordwrap filter": "{{ ('x' * 5000)|wordwrap(1, wrapstring='-' * 200)|length }}",
    "batch fill": "{{ ([1]|batch(10**6, 0)|list)|length }}",
    "list of a string's characters": S + "{{ (s|list)|length }}",
    "split()": "{{ ('a ' * 4000).split()|length }}",
    "translate()": "{{ ('x' * 100).translate(''.maketrans({'x': 'y' * 1000}))|length }}",
    "lipsum()": "{{ lipsum(1000)|length }}",
    "string of a shared list": S + "{% set ns = namespace(l=[s]) %}{% for i in range(10) %}"
    "{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ (ns.l|string)|length }}",
    "{{ }} of a shared list": S + "{% set ns = namespace(l=[s]) %}{% for i in range(10) %}"
    "{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}",
    "a macro collecting": S + "{% macro m() %}{% for i in range(200) %}{{ s }}{% endfor %}"
    "{% endmacro %}{{ m()|length }}",
    "a set block collecting": S + "{% set x %}{% for i in range(200) %}{{ s }}{% endfor %}"
    "{% endset %}{{ x|length }}",
    "a filter block collecting": S + "{% filter upper %}{% for i in range(200) %}{{ s }}"
    "{% endfor %}{% endfilter %}",
    "map calling center": "{{ (['a']|map('center', 10**6)|list)|length }}",
    "a method through attr": "{{ ('x'|attr('ljust'))(10**6)|length }}",
}


def _render(source: str) -> str:
    return ChatTemplate(source).render(CHAT)


@pytest.mark.parametrize("source", AMPLIFIERS.values(), ids=AMPLIFIERS.keys())
def test_what_a_template_builds_is_refused_past_the_ceiling(source, monkeypatch):
    monkeypatch.setattr(chat_bounds, "MAX_TEXT", SMALL)
    with pytest.raises(DataError, match=r"^chat template: .*larger than the limit \(10000 "):
        _render(source)


def test_under_the_ceiling_the_same_operators_work(monkeypatch):
    monkeypatch.setattr(chat_bounds, "MAX_TEXT", SMALL)
    assert _render(DOUBLE.replace("range(20)", "range(10)") + "{% endfor %}{{ ns.s|length }}") == (
        "1024"
    )
    assert _render("{{ 'a' ~ 1 ~ none }}|{{ '%3d|%s' % (7, 'b') }}|{{ 'x'.ljust(3) }}|") == (
        "a1None|  7|b|x  |"
    )
    assert _render("{{ ['a', 'b']|join(', ') }}|{{ 'ab'|replace('b', 'cd') }}") == "a, b|acd"
    assert _render(SMOLLM2_TEMPLATE).startswith("<|im_start|>system\nYou are a helpful")


def test_integers_are_bounded_and_other_template_failures_are_one_line(monkeypatch):
    monkeypatch.setattr(chat_bounds, "MAX_INT_BITS", 10_000)  # unbounded: 16,384 and 158,497 bits
    with pytest.raises(DataError, match=r"integer larger than the limit \(10000 bits\) with '\*'"):
        _render(
            "{% set ns = namespace(x=2**64) %}{% for i in range(8) %}"
            "{% set ns.x = ns.x * ns.x %}{% endfor %}"
        )
    with pytest.raises(DataError, match=r"integer larger than the limit .* with '\*\*'"):
        _render("{{ 3 ** (10**5) }}")
    assert _render("{{ 2 ** 64 * 2 ** 64 }}") == str(2**128)
    with pytest.raises(DataError, match=r"^chat template: ZeroDivisionError: division by zero$"):
        _render("{{ 1 / 0 }}")
    with pytest.raises(DataError, match=r"nests values deeper than the limit \(64 levels\)"):
        _render(
            "{% set ns = namespace(x=1) %}{% for i in range(100) %}{% set ns.x = [ns.x] %}"
            "{% endfor %}{{ ns.x }}"
        )


# At the real ceiling, in a child under a 2 GiB address-space limit: each asks for
# gigabytes when nothing bounds it (a regression fails here, with a MemoryError or a
# kill, instead of taking the machine's memory).
GIGABYTES = [
    "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s }}",  # doubling with ~: 2**40 characters
    "{{ 'x'.ljust(10**10) }}",
    "{{ '%10000000000d' % 1 }}",
    "{% set s = 'x' * 10**7 %}{{ [s] * 10**7 }}",
    "{% set s = 'x' * 10**7 %}{% macro m() %}{% for i in range(100000) %}{{ s }}"
    "{% endfor %}{% endmacro %}{{ m() }}",
]


def test_templates_that_build_gigabytes_are_refused_at_the_real_ceiling():
    import os
    import resource
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys\n"
        "from attnkit.data.chat import ChatTemplate\n"
        "from attnkit.errors import DataError\n"
        "for source in sys.argv[1:]:\n"
        "    try:\n"
        "        ChatTemplate(source).render([{'role': 'user', 'content': 'hi'}])\n"
        "        print('rendered', flush=True)\n"
        "    except DataError as e:\n"
        "        print(e, flush=True)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]), OMP_NUM_THREADS="1")
    limit = 2 << 30
    result = subprocess.run(
        [sys.executable, "-c", script, *GIGABYTES], capture_output=True, text=True, env=env,
        timeout=300, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-500:]
    lines = result.stdout.splitlines()
    assert len(lines) == len(GIGABYTES), result.stdout
    assert all(line.startswith("chat template:") and "than the limit" in line for line in lines)


def test_doubling_with_tilde_is_refused_at_once_at_the_real_ceiling():
    # A plain {% set %} inside a loop is the loop's own in Jinja (it never carries
    # over), so this form doubles nothing; a namespace carries it over.
    plain = "{% set s = 'x' %}{% for i in range(40) %}{% set s = s ~ s %}{% endfor %}{{ s }}"
    assert _render(plain) == "x"
    start = time.process_time()  # CPU time: the wall clock of a shared machine varies
    with pytest.raises(DataError) as refused:
        _render(GIGABYTES[0])  # 2**40 characters unbounded; refused at 2**24
    assert time.process_time() - start < 0.5
    message = str(refused.value)
    assert "\n" not in message and message.startswith("chat template: ")
    assert "than the limit (16777216 characters) with '~'" in message
