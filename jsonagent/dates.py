"""Calendar dates as people write them, read out of text: `2027-03-07` (and a timestamp that
starts so), `07.03.2027`, `3/7/2027`, `March 7, 2027` and `7 Mar 2027`; not `March 7`
without a year, which could be any. grounding.py checks an answer's dates as dates: read as
numbers, their parts (2027, 3, 7) are each seen in almost any run that read the clock. And
times of day (`12:33`), whose hours and minutes grounding.py keeps apart from other numbers.

Each mention keeps every day it may be: `3/7/2027` is 7 March or 3 July. Days are proleptic
ordinals (`date.toordinal()`). Pure functions; nothing from jsonagent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

_MONTHS = {name: i + 1 for i, names in enumerate(
    ["january jan", "february feb", "march mar", "april apr", "may", "june jun", "july jul",
     "august aug", "september sept sep", "october oct", "november nov", "december dec"])
    for name in names.split()}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<year>\d{4})"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_FORMS = [
    re.compile(r"(?<![\d.])(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})(?!\d)"),
    re.compile(r"(?<![\d.])(?P<day>\d{1,2})\.(?P<month>\d{1,2})\.(?P<year>\d{4})(?![\d.])"),
    re.compile(r"(?<![\d/])(?P<a>\d{1,2})/(?P<b>\d{1,2})/(?P<year>\d{4})(?![\d/])"),
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}(?!\d)", re.I),
    re.compile(rf"(?<!\d){_DAY}(?:\s+of)?\s+{_MONTH},?\s+{_YEAR}(?!\d)", re.I),
]


@dataclass(frozen=True, slots=True)
class DateMention:
    text: str
    """As written, for the message that names it."""
    days: tuple[int, ...]
    """Every day it may be, as ordinals."""
    start: int
    end: int


def in_text(text: str) -> list[DateMention]:
    """Every date written in `text`."""
    found: list[DateMention] = []
    taken = [False] * len(text)
    for form in _FORMS:
        for m in form.finditer(text):
            if any(taken[m.start():m.end()]):
                continue
            days = _days(m)
            if days:
                found.append(DateMention(m.group().strip(), days, m.start(), m.end()))
                taken[m.start():m.end()] = [True] * (m.end() - m.start())
    return found


def without(text: str, mentions: list[DateMention]) -> str:
    """`text` with the mentions blanked out, so that their parts are not read as numbers."""
    for m in mentions:
        text = text[:m.start] + " " * (m.end - m.start) + text[m.end:]
    return text


_CLOCK = re.compile(r"(?<![\d:.])([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d)(?:\.\d+)?)?(?![\d:])")
"""A time of day, `12:33` or `12:33:07.5` (in a timestamp too, and its offset `+09:00`)."""


def clock_times(text: str) -> tuple[str, list[float]]:
    """`text` with its times of day blanked out, and their hours, minutes and seconds."""
    parts: list[float] = []
    for m in reversed(list(_CLOCK.finditer(text))):
        parts += [float(g) for g in m.groups() if g is not None]
        text = text[:m.start()] + " " * (m.end() - m.start()) + text[m.end():]
    return text, parts


def _days(m: re.Match) -> tuple[int, ...]:
    fields = m.groupdict()
    if fields.get("a"):  # 3/7/2027: month first in the US, day first elsewhere
        pairs = [(int(fields["a"]), int(fields["b"])), (int(fields["b"]), int(fields["a"]))]
    else:
        month = fields["month"]
        month = _MONTHS[month.lower()] if month.isalpha() else int(month)
        pairs = [(month, int(fields["day"]))]
    days = set()
    for month, day in pairs:
        try:
            days.add(date(int(fields["year"]), month, day).toordinal())
        except ValueError:
            pass
    return tuple(sorted(days))
