"""``ChoiceText``: the text of a choice handed out as it grows, cut at stop strings."""

from __future__ import annotations

from collections.abc import Sequence

from attnkit.serve.completion import ChoiceText


class Chars:
    """A tokenizer whose token ``i`` is the character ``chr(i)`` (``0xFFFD`` for 0: half a
    UTF-8 character, as a byte-level decode shows it)."""

    def decode(self, ids: Sequence[int]) -> str:
        return "".join("\ufffd" if i == 0 else chr(i) for i in ids)


def _feed(choice: ChoiceText, text: str) -> list[str]:
    return [choice.add(ord(c)) for c in text]


def test_a_possible_stop_string_is_held_back_until_it_cannot_be_one():
    choice = ChoiceText(Chars(), [ord("x")], ["END"])
    assert _feed(choice, "abEN") == ["a", "b", "", ""]
    assert choice.add(ord("d")) == "ENd"  # "ENd" is no stop string: out it goes
    assert _feed(choice, "E") == [""]
    assert choice.finish("length") == "E" and choice.text == "abENdE"


def test_a_stop_string_ends_the_choice_and_is_not_part_of_it():
    choice = ChoiceText(Chars(), [], ["\n\n", "STOP"])
    out = _feed(choice, "hi ST")
    assert choice.add(ord("O")) == "" and choice.finish_reason is None
    out.append(choice.add(ord("P")))
    assert "".join(out) == "hi " == choice.text
    assert choice.finish_reason == choice.openai_reason == "stop"


def test_half_a_character_waits_and_eos_is_a_stop():
    choice = ChoiceText(Chars(), [], [])
    assert choice.add(ord("a")) == "a"
    assert choice.add(0) == ""  # U+FFFD at the end: the next byte may complete it
    assert choice.add(ord("b")) == "\ufffdb"
    assert choice.finish("eos") == "" and choice.openai_reason == "stop"


def test_the_prompt_context_is_decoded_ahead_and_removed():
    class Spaces(Chars):
        def decode(self, ids: Sequence[int]) -> str:  # SentencePiece: no leading space
            return super().decode(ids).lstrip(" ")

    choice = ChoiceText(Spaces(), [ord("w")], [])
    assert choice.add(ord(" ")) == " "  # decoded alone it would be ""
    assert choice.add(ord("x")) == "x"
