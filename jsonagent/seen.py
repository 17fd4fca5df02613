"""What a run's numbers and days make in one arithmetic step: the rule of grounding.py for
"seen", apart from where the numbers come from."""

from __future__ import annotations

from bisect import bisect_left
from datetime import date, timedelta
from typing import Iterable

from .dates import DateMention
from .numbers import Mention

CONSTANTS = (*range(1, 11), 12, 24, 60, 100, 1000)
"""The other operand of a one-step derivation that needs no second number seen."""
DAY_STEPS = 7
"""Days from a day seen that need no number seen: tomorrow, a week on."""
FREE_MONTHS = (1, 3, 6, 12)
"""Months likewise: a month, a quarter, half a year, a year on. Not any: on 2026-11-28 the
1.5B model answered "100 days from today" with 2027-01-28 (round 17)."""
MAX_DAYS = 100_000
"""The largest number seen that is taken as a count of days from a day seen."""
MAX_OPERANDS = 200


class Seen:
    """The values seen, sorted, and what one arithmetic step makes of them: two seen, or one
    seen and a constant, never two constants (72 is 8 x 9, and 8 and 9 were seen nowhere).
    A clock reading's parts are seen, and a step adds to them or takes from them (21 in
    Tokyo when it is 12:33 in London), but they are not scaled: 12:33 is no 12 to make
    720 minutes of, or 30 to make 240 of; a duration from a time of day takes code.
    And the days seen, with what one step makes of one: a number of days, months or years
    seen (or a few: tomorrow, a week on, a month, a quarter, half a year or a year on)
    before or after it."""

    def __init__(self, values: Iterable[float], days: Iterable[int] = (),
                 clock: Iterable[float] = ()):
        operands = {abs(v) for v in values}
        self.days = sorted(set(days))
        self.steps = {int(v) for v in operands if v.is_integer() and 0 < v <= MAX_DAYS}
        self.seen = sorted(operands | set(clock))
        self.values = sorted(operands | set(CONSTANTS))
        """What the other operand of a step may be."""
        few = len(operands) <= MAX_OPERANDS
        self.left = [v for v in sorted(operands) if v] if few else list(CONSTANTS)
        """The operands a step starts from; past MAX_OPERANDS, the constants, and the other
        operand must then be seen (`self.values` would let a constant meet a constant)."""
        self.clock = sorted(set(clock) - operands)
        """Clock parts seen as nothing else: operands of a sum or a difference only, with
        another clock part (14:50 less 14:15), a number seen, or a constant (past
        MAX_OPERANDS, only those two)."""
        self.shift = sorted((operands if few else set()) | set(CONSTANTS) | set(self.clock))
        if not few:
            self.values = sorted(operands)

    def shows(self, mention: Mention) -> bool:
        return any(self._shows(x, p / 2 * (1 + 1e-9) + 1e-9 * x, p <= 1)
                   for x, p in mention.readings)

    def _shows(self, x: float, tol: float, derived: bool) -> bool:
        if self._any(x - tol, x + tol, self.seen):
            return True
        if not derived:  # a rounded figure (48 thousand) is one seen, rounded: with its
            return False  # wide margin, a step from anything would match by chance
        for a in self.clock:
            ranges = [(x - a - tol, x - a + tol), (a - x - tol, a - x + tol),  # a + b, a - b
                      (a + x - tol, a + x + tol)]  # b - a
            if any(self._any(lo, hi, self.shift) for lo, hi in ranges if hi > 0):
                return True
        for a in self.left:
            ranges = [(x - a - tol, x - a + tol), (a - x - tol, a - x + tol),  # a + b, a - b
                      (a + x - tol, a + x + tol),  # b - a
                      ((x - tol) / a, (x + tol) / a),  # a * b
                      (a * (x - tol), a * (x + tol))]  # b / a
            if x > tol:
                ranges.append((a / (x + tol), a / (x - tol)))  # a / b
            if x < 10:  # a share of change, as a fraction (8.1% reads 0.081 too): b = a(1 ± x)
                ranges += [(a * (1 + x - tol), a * (1 + x + tol)),
                           (a * (1 - x - tol), a * (1 - x + tol))]
            if tol < x < 1:  # a's share of the total of a and b: b = a(1/x - 1)
                ranges.append((a * (1 / (x + tol) - 1), a * (1 / (x - tol) - 1)))
            if any(self._any(lo, hi, self.values) for lo, hi in ranges if hi > 0):
                return True
        return False

    def shows_day(self, mention: DateMention) -> bool:
        return any(self._shows_day(d) for d in mention.days)

    def _shows_day(self, day: int) -> bool:
        if not self.days:
            return True  # nothing to step from: a date the run never read is not ours to judge
        a = date.fromordinal(day)
        for s in self.days:
            b = date.fromordinal(s)
            apart = abs(day - s)
            months = abs((a.year - b.year) * 12 + a.month - b.month)
            if apart <= DAY_STEPS or apart in self.steps:
                return True
            same_day = a.day == b.day or (b.day > a.day and (a + timedelta(days=1)).day == 1)
            if same_day and (months in FREE_MONTHS or months in self.steps
                             or (months % 12 == 0 and months // 12 in self.steps)):
                return True
        return False

    @staticmethod
    def _any(lo: float, hi: float, among: list[float]) -> bool:
        at = bisect_left(among, lo)
        return at < len(among) and among[at] <= hi
