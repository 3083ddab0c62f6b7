"""Chat templates: a pretrained tokenizer's Jinja template turning messages into text.

An instruct model was trained on conversations written in one format, e.g.
SmolLM2's ChatML (``<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n``).
The format ships with its tokenizer as a Jinja template (``chat_template`` in
``tokenizer_config.json`` or the GGUF metadata; ``PretrainedTokenizer`` keeps
it). ``ChatTemplate.render`` fills it in as ``transformers``'
``apply_chat_template(..., tokenize=False)`` does: the template sees
``messages``, ``add_generation_prompt`` (end with the assistant's header, for
generation) and the ``bos_token``/``eos_token`` strings, in a sandboxed
environment with ``trim_blocks``/``lstrip_blocks``, ``raise_exception`` and
a ``tojson`` filter that does not escape HTML. Templates are untrusted text
(they come inside a GGUF file or a ``tokenizer_config.json``): the sandbox
keeps them from reaching Python internals, and sizes are bounded
(``MAX_TEXT`` characters, ``attnkit.data.chat_bounds``): an operator
(``*``, ``+``, ``~``, ``%``, ...), filter or method whose result would be
larger, and a rendering that writes more, are refused with one line before
the memory is taken (``{{ 'x' * 10**10 }}`` would otherwise ask for 10 GB).
Whatever else a template raises (``{{ 1 / 0 }}``) is one line too.

A message is ``{"role": str, "content": str}`` (roles as the template knows
them: ``system``, ``user``, ``assistant``). ``check_messages`` names the
first malformed one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from attnkit import jsonio
from attnkit.errors import DataError

Message = Mapping[str, str]


class ChatTokenizer(Protocol):
    """What a chat template needs of a tokenizer."""

    chat_template: str | None
    bos_id: int
    eos_id: int

    def id_to_token(self, i: int) -> str: ...


def _tojson(x: object, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:  # fmt: skip
    return jsonio.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                        sort_keys=sort_keys)  # fmt: skip


def _reason(e: Exception) -> str:
    import jinja2

    return str(e) if isinstance(e, jinja2.exceptions.TemplateError) else f"{type(e).__name__}: {e}"


def _raise_exception(message: str) -> None:
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


class ChatTemplate:
    """A compiled chat template with its special-token strings.

    Args:
        source: the Jinja template.
        bos_token, eos_token: what the template may write as ``bos_token``/``eos_token``.
    """

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        try:
            from jinja2.ext import loopcontrols

            from attnkit.data.chat_bounds import BoundedEnvironment
        except ImportError as e:  # pragma: no cover - jinja2 comes with the train extra
            raise DataError("chat templates need jinja2: pip install 'attnkit[train]'") from e

        env = BoundedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols],
            filters={"tojson": _tojson},
        )  # fmt: skip
        env.globals["raise_exception"] = _raise_exception
        try:
            self._template = env.from_string(source)
        except Exception as e:  # a syntax error, or a source nested past the parser's recursion
            raise DataError(f"chat template: not a valid Jinja template ({_reason(e)})") from None
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool = False) -> str:
        """The conversation as the model's text; ``DataError`` for what the template refuses."""
        import jinja2

        from attnkit.data.chat_bounds import MAX_TEXT

        pieces, written = [], 0
        try:
            for piece in self._template.generate(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            ):
                written += len(piece)
                if written > MAX_TEXT:
                    raise jinja2.exceptions.TemplateError(
                        f"writes more than the limit ({MAX_TEXT} characters)"
                    )
                if piece:  # (ten billion empty pieces would be 80 GB of list)
                    pieces.append(piece)
            return "".join(pieces)
        except Exception as e:  # what the template raises or runs into (1 / 0, a bad type)
            raise DataError(f"chat template: {_reason(e)}") from None


def chat_template_of(tokenizer: Any) -> ChatTemplate:
    """The chat template a tokenizer carries; ``DataError`` when it has none."""
    source = getattr(tokenizer, "chat_template", None)
    if not source:
        raise DataError(
            "this model's tokenizer has no chat template; give prompt/completion records "
            "(or a model imported with one, such as SmolLM2-Instruct)"
        )
    return ChatTemplate(
        source,
        bos_token=tokenizer.id_to_token(tokenizer.bos_id),
        eos_token=tokenizer.id_to_token(tokenizer.eos_id),
    )


def check_messages(value: object) -> list[dict[str, str]]:
    """``value`` as a list of messages; ``DataError`` naming the first bad one.

    Messages keep only ``role`` and ``content``; both must be strings.
    """
    if not isinstance(value, list) or not value:
        raise DataError('"messages": expected a non-empty list of {"role", "content"} objects')
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise DataError(f"messages[{i}]: expected an object, got {type(m).__name__}")
        for key in ("role", "content"):
            if not isinstance(m.get(key), str):
                got = "missing" if key not in m else f"a {type(m[key]).__name__}"
                raise DataError(f"messages[{i}].{key}: expected a string, {got}")
        out.append({"role": m["role"], "content": m["content"]})
    return out
