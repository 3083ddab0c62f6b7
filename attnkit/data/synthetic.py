"""The quickstart task: English number words -> German number words.

    342 -> "three hundred forty-two" -> "dreihundertzweiundvierzig"

Small enough to learn on a CPU in minutes, yet it needs real attention: German
puts units before tens ("zweiundvierzig" = two-and-forty), so the model must
reorder, and it writes one space-free word, so it must align inside words.
Numbers run from 0 to 999,999; English follows the US style without "and".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attnkit.errors import UsageError

MAX_NUMBER = 999_999

_EN_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_EN_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")

_DE_ONES = (
    "null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn vierzehn "
    "fünfzehn sechzehn siebzehn achtzehn neunzehn"
).split()
_DE_TENS = ("", "", *"zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig neunzig".split())


def _check_number(n: int) -> None:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or not 0 <= n <= MAX_NUMBER:
        raise UsageError(f"number must be an int in [0, {MAX_NUMBER}], got {n!r}")


def _en_below_1000(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    words = [f"{_EN_ONES[hundreds]} hundred"] if hundreds else []
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_EN_TENS[tens] + (f"-{_EN_ONES[ones]}" if ones else ""))
    elif rest:
        words.append(_EN_ONES[rest])
    return " ".join(words)


def number_to_english(n: int) -> str:
    """``2340`` -> ``"two thousand three hundred forty"``."""
    _check_number(n)
    if n == 0:
        return "zero"
    thousands, rest = divmod(int(n), 1000)
    words = [f"{_en_below_1000(thousands)} thousand"] if thousands else []
    if rest:
        words.append(_en_below_1000(rest))
    return " ".join(words)


def _de_below_1000(n: int, *, before_noun: bool) -> str:
    """German for 1..999; ``before_noun``: a final 1 is "ein" (as in "eintausend")."""
    hundreds, rest = divmod(n, 100)
    # "einhundert", not "einshundert": 1 in front of a multiplier is "ein".
    word = f"{'ein' if hundreds == 1 else _DE_ONES[hundreds]}hundert" if hundreds else ""
    if rest == 1:
        word += "ein" if before_noun else "eins"  # "einhunderteins" but "einhunderteintausend"
    elif rest < 20:
        word += _DE_ONES[rest] if rest else ""
    else:
        tens, ones = divmod(rest, 10)
        # Units before tens: 42 = "zweiundvierzig"; 21 = "einundzwanzig" (not "eins...").
        unit = (("ein" if ones == 1 else _DE_ONES[ones]) + "und") if ones else ""
        word += unit + _DE_TENS[tens]
    return word


def number_to_german(n: int) -> str:
    """``2340`` -> ``"zweitausenddreihundertvierzig"`` (one word, current spelling)."""
    _check_number(n)
    if n == 0:
        return "null"
    thousands, rest = divmod(int(n), 1000)
    word = f"{_de_below_1000(thousands, before_noun=True)}tausend" if thousands else ""
    return word + (_de_below_1000(rest, before_noun=False) if rest else "")


def _pairs(numbers: list[int]) -> list[tuple[str, str]]:
    return [(number_to_english(x), number_to_german(x)) for x in numbers]


def sample_numbers(
    n: int, low: int = 0, high: int = MAX_NUMBER, *, seed: int = 0, balanced: bool = False
) -> list[int]:
    """``n`` distinct numbers from ``[low, high]``, deterministic for ``seed``.

    Uniform by default. With ``balanced``, each magnitude (number of digits) is
    equally likely, so short numbers are not drowned out by six-digit ones
    (uniformly, fewer than 0.1% of numbers up to a million are below 1000).
    """
    if not 0 <= low <= high <= MAX_NUMBER:
        raise UsageError(f"need 0 <= low <= high <= {MAX_NUMBER}, got low={low}, high={high}")
    if not 0 <= n <= high - low + 1:
        raise UsageError(
            f"n_examples={n}: only {high - low + 1} distinct numbers in [{low}, {high}]"
        )
    rng = np.random.default_rng(seed)
    p = None
    if balanced:
        digits = np.char.str_len(np.arange(low, high + 1).astype(str))
        counts = np.bincount(digits)
        p = 1.0 / counts[digits]
        p /= p.sum()
    picked = rng.choice(high - low + 1, size=n, replace=False, p=p) + low
    # Weighted draws come out roughly in weight order: shuffle so that splits
    # taken from consecutive slices get every magnitude.
    rng.shuffle(picked)
    return picked.tolist()


def number_pairs(
    n_examples: int, low: int = 0, high: int = MAX_NUMBER, *, seed: int = 0
) -> list[tuple[str, str]]:
    """``(english, german)`` pairs for ``n_examples`` distinct random numbers in ``[low, high]``."""
    return _pairs(sample_numbers(n_examples, low, high, seed=seed))


def round_numbers(high: int = MAX_NUMBER) -> list[int]:
    """Hundreds and thousands with nothing after them (500, 2000, 300000), up to ``high``.

    Few of them come up in a uniform sample (about 1 in 1000), yet they are what a
    newcomer types first; without them a model says "fünfhundertfünf" for 500.
    """
    hundreds = [h * 100 for h in range(1, 10)]
    thousands = [t * 1000 for t in range(1, 1000)]
    return [n for n in hundreds + thousands if n <= high]


def number_splits(
    n_train: int,
    n_valid: int,
    n_test: int,
    low: int = 0,
    high: int = MAX_NUMBER,
    *,
    seed: int = 0,
    balanced: bool = False,
    always_train: int = 0,
    also_train: Sequence[int] = (),
) -> dict[str, list[tuple[str, str]]]:
    """Train/valid/test pairs over disjoint number sets, so evaluation is on unseen numbers.

    ``always_train``: every number in ``[low, always_train)`` is a training pair
    (the irregular words under 100 are what a newcomer types first; a model
    cannot guess "zwölf" from "twelve" if it never saw it); the held-out
    splits are drawn from the rest. ``also_train``: more numbers that are always
    training pairs (``round_numbers``: "five hundred", "two thousand").
    """
    sizes = {"train": n_train, "valid": n_valid, "test": n_test}
    for name, size in sizes.items():
        if size < 0:
            raise UsageError(f"n_{name} must be >= 0, got {size}")
    numbers = sample_numbers(sum(sizes.values()), low, high, seed=seed, balanced=balanced)
    if always_train > low or also_train:
        first = list(range(low, min(always_train, high + 1)))
        first += sorted({n for n in also_train if low <= n <= high} - set(first))
        if len(first) > n_train:
            raise UsageError(f"always_train={always_train}: more numbers than n_train={n_train}")
        kept = set(first)
        rest = [n for n in numbers if n not in kept]
        numbers = first + rest[: n_train - len(first)] + rest[n_train - len(first) :]
        numbers = numbers[: sum(sizes.values())]
        rng = np.random.default_rng(seed + 1)
        head = numbers[:n_train]
        rng.shuffle(head)  # the small numbers spread over the epoch, not in its first batches
        numbers = head + numbers[n_train:]
    splits, start = {}, 0
    for name, size in sizes.items():
        chunk = numbers[start : start + size]
        splits[name] = _pairs(chunk)
        start += size
    return splits
