"""The number-words task: hand-checked conversions, determinism, disjoint splits."""

from __future__ import annotations

import pytest

from attnkit.data.synthetic import (
    number_pairs,
    number_splits,
    number_to_english,
    number_to_german,
    sample_numbers,
)
from attnkit.errors import UsageError

# Checked by hand against German and US-English spelling rules.
TABLE = [
    (0, "zero", "null"),
    (1, "one", "eins"),
    (7, "seven", "sieben"),
    (11, "eleven", "elf"),
    (12, "twelve", "zwölf"),
    (16, "sixteen", "sechzehn"),
    (17, "seventeen", "siebzehn"),
    (21, "twenty-one", "einundzwanzig"),
    (30, "thirty", "dreißig"),
    (36, "thirty-six", "sechsunddreißig"),
    (42, "forty-two", "zweiundvierzig"),
    (67, "sixty-seven", "siebenundsechzig"),
    (70, "seventy", "siebzig"),
    (99, "ninety-nine", "neunundneunzig"),
    (100, "one hundred", "einhundert"),
    (101, "one hundred one", "einhunderteins"),
    (117, "one hundred seventeen", "einhundertsiebzehn"),
    (342, "three hundred forty-two", "dreihundertzweiundvierzig"),
    (600, "six hundred", "sechshundert"),
    (1000, "one thousand", "eintausend"),
    (1001, "one thousand one", "eintausendeins"),
    (2340, "two thousand three hundred forty", "zweitausenddreihundertvierzig"),
    (16016, "sixteen thousand sixteen", "sechzehntausendsechzehn"),
    (21000, "twenty-one thousand", "einundzwanzigtausend"),
    (101000, "one hundred one thousand", "einhunderteintausend"),
    (
        999999,
        "nine hundred ninety-nine thousand nine hundred ninety-nine",
        "neunhundertneunundneunzigtausendneunhundertneunundneunzig",
    ),
]


@pytest.mark.parametrize(("n", "english", "german"), TABLE)
def test_known_conversions(n: int, english: str, german: str) -> None:
    assert number_to_english(n) == english
    assert number_to_german(n) == german


@pytest.mark.parametrize("bad", [-1, 1_000_000, 2.0, True])
def test_out_of_range(bad: object) -> None:
    with pytest.raises(UsageError, match="number must be an int"):
        number_to_german(bad)  # type: ignore[arg-type]


def test_german_words_have_no_spaces() -> None:
    assert all(" " not in de for _, de in number_pairs(200, seed=0))


def test_number_pairs_deterministic_and_distinct() -> None:
    a = number_pairs(50, 0, 999, seed=3)
    assert a == number_pairs(50, 0, 999, seed=3)
    assert a != number_pairs(50, 0, 999, seed=4)
    assert len(set(a)) == 50
    nums = sample_numbers(50, 10, 20 + 40, seed=1)
    assert all(10 <= x <= 60 for x in nums) and len(set(nums)) == 50
    with pytest.raises(UsageError, match="n_examples=12"):
        number_pairs(12, 0, 10)


def test_splits_are_disjoint() -> None:
    splits = number_splits(300, 50, 50, 0, 999, seed=0)
    assert {k: len(v) for k, v in splits.items()} == {"train": 300, "valid": 50, "test": 50}
    train, valid, test = (set(splits[k]) for k in ("train", "valid", "test"))
    assert not (train & valid) and not (train & test) and not (valid & test)
    assert splits == number_splits(300, 50, 50, 0, 999, seed=0)


def test_small_and_round_numbers_are_always_training_pairs() -> None:
    """What a newcomer types first ("twelve", "five hundred", "two thousand") is
    always seen in training and never held out; the splits stay disjoint."""
    from attnkit.data.synthetic import number_splits, round_numbers

    rounds = round_numbers()
    assert {500, 2000, 300_000, 999_000} <= set(rounds) and 501 not in rounds
    splits = number_splits(3000, 300, 300, low=1, seed=3, balanced=True,
                           always_train=100, also_train=rounds)  # fmt: skip
    train = {src for src, _ in splits["train"]}
    held = {src for name in ("valid", "test") for src, _ in splits[name]}
    must = {number_to_english(n) for n in [*range(1, 100), *rounds]}
    assert must <= train and not must & held and not train & held
    assert [len(splits[k]) for k in ("train", "valid", "test")] == [3000, 300, 300]
