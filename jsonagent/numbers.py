"""Numbers as people write them, read out of text and JSON data: digits with thousands
separators, decimals, percentages and scale words (`48,213`, `3.5%`, `1.5 million`, `48k`),
and numbers in words (`forty-eight thousand two hundred thirteen`). grounding.py compares
an answer's numbers with those a run saw.

Each mention keeps every way it may be read, as (value, precision) pairs: `48k` is 48,000
or 48 (a size in KB), `12%` is 12 or 0.12. A reading's precision is the unit of its last
written digit (0.01 for `3.14`, 100,000 for `1.5 million`), so a rounded figure can be
matched to the exact one it rounds. Signs are dropped: `-5` and `5` are the same figure
seen ("fell by 5" reports a change of -5). Pure functions; nothing from jsonagent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

Reading = tuple[float, float]
"""(value, precision): the value, and the unit of its last written digit."""

_DIGITS = re.compile(r"""
    (?<![\d.])                           # not the tail of a longer number
    (?P<num>
        \d{1,3}(?:,\d{3})+(?:\.\d+)?     # 48,213 and 1,234.56
      | \d{1,3}(?:[\u00a0\u202f\u2009']\d{3})+(?:\.\d+)?  # 48 213 (narrow spaces), 48'213
      | \d+(?:\.\d+)?(?:[eE][-+]?\d+)?   # 48213, 3.14, 1.2e6
      | \.\d+                            # .5
    )
    (?P<pct>\s?%)?
    (?:\s?(?P<scale>thousand|million|billion|trillion|bn|mn|k|K|M|B)(?![A-Za-z]))?
    """, re.X)
_DOTTED = re.compile(r"(?<![\d.])\d+(?:\.\d+){2,}(?![\d.])")
"""Three or more dotted parts: a version or a date (3.12.1, 14.03.2025), not a decimal."""

_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12,
           "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "bn": 1e9, "mn": 1e6}
_LETTERS = {"k", "K", "M", "B"}
"""Scale letters that may as well be a unit (5M of memory, 48k of RAM, 5B parameters)."""

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split())}
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fifth": 5, "eighth": 8, "ninth": 9,
             "twelfth": 12}
_WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True, slots=True)
class Mention:
    text: str
    """As written, for the message that names it."""
    readings: tuple[Reading, ...]

    @property
    def values(self) -> tuple[float, ...]:
        return tuple(v for v, _ in self.readings)


def in_text(text: str) -> list[Mention]:
    """Every number written in `text`, in digits or in words."""
    found: list[Mention] = []
    taken = [False] * len(text)
    for m in _DOTTED.finditer(text):
        parts = m.group().split(".")
        # the first two parts read as a decimal too: "Python 3.12" is seen in 3.12.1
        head = ((float(f"{parts[0]}.{parts[1]}"), 10.0 ** -len(parts[1])),)
        for i, part in enumerate(parts):
            found.append(Mention(part, ((float(part), 1.0), *(head if i == 0 else ()))))
        taken[m.start():m.end()] = [True] * (m.end() - m.start())
    for m in _DIGITS.finditer(text):
        if taken[m.start()]:
            continue
        readings = _readings(m.group("num"), m.group("pct"), m.group("scale"))
        if readings:
            found.append(Mention(m.group().strip(), readings))
        taken[m.start():m.end()] = [True] * (m.end() - m.start())
    found += _in_words(text, taken)
    return found


def in_data(data: Any, keys: bool = True) -> Iterator[Mention]:
    """Every number in JSON data: its numbers as they are, the text in its strings (and in
    its keys, unless `keys` is False)."""
    if isinstance(data, bool) or data is None:
        return
    if isinstance(data, (int, float)):
        yield Mention(_shown(data), ((abs(float(data)), _precision_of(data)),))
    elif isinstance(data, str):
        yield from in_text(data)
    elif isinstance(data, dict):
        for key, value in data.items():
            if keys:
                yield from in_text(str(key))
            yield from in_data(value, keys)
    elif isinstance(data, (list, tuple)):
        for item in data:
            yield from in_data(item, keys)


def _readings(num: str, pct: str | None, scale: str | None) -> tuple[Reading, ...]:
    plain = num.replace(",", "").replace("'", "")
    plain = re.sub(r"[\u00a0\u202f\u2009]", "", plain)
    try:
        value = float(plain)
    except ValueError:
        return ()
    if value != value or value in (float("inf"), float("-inf")):
        return ()
    mantissa = plain.lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    precision = 10.0 ** -decimals
    if "e" in plain.lower():  # 1.2e6: the unit of the last digit, scaled the same way
        precision *= 10.0 ** int(plain.lower().split("e")[1])
    readings = [(value, precision)]
    if scale:
        factor = _SCALES[scale]
        scaled = (value * factor, precision * factor)
        readings = [scaled, *readings] if scale in _LETTERS else [scaled]
    if pct:
        readings += [(v / 100, p / 100) for v, p in readings]
    return tuple(readings)


def _in_words(text: str, taken: list[bool]) -> list[Mention]:
    """Runs of number words: "forty-eight thousand two hundred and thirteen", "twelfth";
    a word `taken` by a number in digits ("1.5 million") is part of that one."""
    out: list[Mention] = []
    words = [(m.group().lower(), m.start(), m.end()) for m in _WORD.finditer(text)
             if not taken[m.start()]]
    i = 0
    while i < len(words):
        run, total, current, last_scale, j = [], 0, 0, 1.0, i
        while j < len(words):
            word, start, end = words[j]
            if run and word == "and" and j + 1 < len(words) and _is_number_word(words[j + 1][0]):
                j += 1
                continue
            if _unit(word) is not None:
                current += _unit(word)
                last_scale = 1.0
            elif word in _TENS:
                current += _TENS[word]
                last_scale = 1.0
            elif word == "hundred":
                current = (current or 1) * 100
                last_scale = 1.0
            elif word in ("thousand", "million", "billion", "trillion"):
                total += (current or 1) * _SCALES[word]
                current, last_scale = 0, _SCALES[word]
            else:
                break
            run.append((start, end))
            j += 1
        if run:
            value = float(total + current)
            out.append(Mention(text[run[0][0]:run[-1][1]], ((value, last_scale),)))
            i = j
        else:
            i += 1
    return out


def _unit(word: str) -> int | None:
    """zero to nineteen, as a cardinal or an ordinal ("fourth", "thirteenth")."""
    if word in _UNITS:
        return _UNITS[word]
    if word in _ORDINALS:
        return _ORDINALS[word]
    return _UNITS.get(word[:-2]) if word.endswith("th") else None


def _is_number_word(word: str) -> bool:
    return _unit(word) is not None or word in _TENS or word == "hundred"


def _precision_of(value: int | float) -> float:
    if isinstance(value, int) or float(value).is_integer():
        return 1.0
    text = repr(float(value))
    if "e" in text:
        return abs(float(value)) * 1e-12
    return 10.0 ** -len(text.split(".")[1])


def _shown(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) or float(value).is_integer() \
        else f"{value:,}".rstrip("0")
