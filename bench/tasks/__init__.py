"""Benchmark tasks: a question, what the scripted human answers, and a checker for the answer.

Pure standard library, so that both frameworks' runners import the same list. A checker
sees only the final answer as text, plus the clock readings taken just before and just
after the run (tasks about "now" accept either end). Checkers look for the right value in
the answer, not for a phrasing.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any, Callable
from zoneinfo import ZoneInfo

UTC = timezone.utc
NO_HUMAN_REPLY = "I can't help with that; please work it out with your tools."


@dataclass(frozen=True)
class Clock:
    start: datetime
    end: datetime

    def readings(self, tz: str = "UTC") -> list[datetime]:
        zone = ZoneInfo(tz)
        return [self.start.astimezone(zone), self.end.astimezone(zone)]


Checker = Callable[[str, Clock], bool]


@dataclass(frozen=True)
class Task:
    id: str
    kind: str
    """time, code, human, multi or recover."""
    question: str
    check: Checker
    human: tuple[str, ...] = ()
    """What the scripted human answers, in order; afterwards NO_HUMAN_REPLY."""
    expected: str = ""
    """What a right answer contains, for a person reading a failed task; checkers do not use it."""
    embed: Callable[[], Any] | None = None
    """For a task that embeds the agent: a fresh `embedding.Embedding` per run (its own tools,
    the calls the person refuses, the answer's type, what must hold afterwards)."""


# ---- checkers -------------------------------------------------------------------------

def numbers_in(text: str) -> list[float]:
    """Every number written in the text; thousands separators and spaces inside digits allowed."""
    cleaned = re.sub(r"(?<=\d)[,\u202f_ ](?=\d{3}\b)", "", str(text))
    return [float(m) for m in re.findall(r"\d+(?:\.\d+)?", cleaned)]


def has_number(value: float, tolerance: float = 0.0) -> Checker:
    def check(answer: str, clock: Clock) -> bool:
        return any(math.isclose(n, value, abs_tol=tolerance, rel_tol=0) for n in numbers_in(answer))
    return check


def has_text(*options: str) -> Checker:
    def check(answer: str, clock: Clock) -> bool:
        return any(o.lower() in str(answer).lower() for o in options)
    return check


def about_now(render: Callable[[datetime], list[str] | str], tz: str = "UTC") -> Checker:
    """The answer names what `render` makes of the clock at the start or at the end of the run."""
    def check(answer: str, clock: Clock) -> bool:
        wanted: list[str] = []
        for now in clock.readings(tz):
            got = render(now)
            wanted += [got] if isinstance(got, str) else got
        return any(w.lower() in str(answer).lower() for w in wanted)
    return check


def number_about_now(compute: Callable[[datetime], float], tz: str = "UTC", tolerance: float = 0) -> Checker:
    def check(answer: str, clock: Clock) -> bool:
        values = [compute(now) for now in clock.readings(tz)]
        low, high = min(values) - tolerance, max(values) + tolerance
        return any(low <= n <= high for n in numbers_in(answer))
    return check


def _hhmm(now: datetime) -> list[str]:
    """HH:MM for the minute of the reading and the two either side; 12-hour forms too."""
    out = []
    for delta in (-1, 0, 1):
        t = now + timedelta(minutes=delta)
        out += [t.strftime("%H:%M"), t.strftime("%I:%M").lstrip("0")]
    return out


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _collatz(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _primes_below(n: int) -> int:
    sieve = bytearray([1]) * n
    sieve[:2] = b"\x00\x00"
    for i in range(2, int(n ** 0.5) + 1):
        if sieve[i]:
            sieve[i * i::i] = bytearray(len(sieve[i * i::i]))
    return sum(sieve)


# ---- the tasks ------------------------------------------------------------------------

TASKS: list[Task] = [
    # time: the answer depends on the current date or time, so the time tool is needed
    Task("time-year", "time", "What year is it right now? Answer with the year.",
         about_now(lambda t: str(t.year)), expected="the current year"),
    Task("time-weekday-utc", "time", "What day of the week is it today in UTC?",
         about_now(lambda t: t.strftime("%A")), expected="today's weekday (UTC)"),
    Task("time-tokyo-hour", "time",
         "What hour of the day (0-23) is it right now in Tokyo? Answer with the hour.",
         number_about_now(lambda t: t.hour, tz="Asia/Tokyo"), expected="the hour in Asia/Tokyo"),
    Task("time-plus-100-days", "time",
         "What will the date be 100 days from today (UTC)? Give it as YYYY-MM-DD.",
         about_now(lambda t: (t.date() + timedelta(days=100)).isoformat()), expected="today + 100 days"),
    Task("time-days-to-new-year", "time",
         "How many days are left from today (UTC) until the next January 1st?",
         number_about_now(lambda t: (date(t.year + 1, 1, 1) - t.date()).days),
         expected="days until 1 January"),
    Task("time-day-of-year", "time",
         "What is today's day number within the year (January 1st is day 1), in UTC?",
         number_about_now(lambda t: t.timetuple().tm_yday), expected="the ordinal day"),
    # code: numeric questions a small model cannot do in its head
    Task("code-pow", "code", "What is 2**100? Use code.", has_number(2 ** 100), expected=str(2 ** 100)),
    Task("code-primes", "code", "How many prime numbers are there below 10000?",
         has_number(_primes_below(10000)), expected=str(_primes_below(10000))),
    Task("code-fibonacci", "code",
         "What is the 50th Fibonacci number, if the 1st and 2nd are both 1?",
         has_number(_fib(50)), expected=str(_fib(50))),
    Task("code-sqrt", "code", "What is the square root of 987654321, rounded to 3 decimal places?",
         has_number(round(math.sqrt(987654321), 3), 0.0011), expected=f"{math.sqrt(987654321):.3f}"),
    Task("code-sha256", "code",
         "What are the first 8 hexadecimal characters of the SHA-256 hash of the text 'jsonagent'?",
         has_text(hashlib.sha256(b"jsonagent").hexdigest()[:8]),
         expected=hashlib.sha256(b"jsonagent").hexdigest()[:8]),
    Task("code-digit-sum", "code", "What is the sum of the decimal digits of 3**200?",
         has_number(sum(map(int, str(3 ** 200)))), expected=str(sum(map(int, str(3 ** 200))))),
    Task("code-factorial-zeros", "code", "How many trailing zeros does 1000! (1000 factorial) have?",
         has_number(249), expected="249"),
    Task("code-collatz", "code",
         "How many steps does the Collatz sequence starting at 27 take to reach 1?",
         has_number(_collatz(27)), expected=str(_collatz(27))),
    # human: only the person knows; the scripted human answers
    Task("human-name", "human", "Ask me what my name is, then greet me by name.",
         has_text("Ada"), human=("My name is Ada.",), expected="Ada"),
    Task("human-square", "human", "Ask me for my favourite number, then tell me its square.",
         has_number(37 ** 2), human=("37",), expected=str(37 ** 2)),
    Task("human-age", "human",
         "Ask me which year I was born in, then tell me how old I turn this year.",
         number_about_now(lambda t: t.year - 1990), human=("1990",), expected="this year - 1990"),
    Task("human-product", "human",
         "Ask me for two numbers, one question per number, then tell me their product.",
         has_number(12345 * 6789), human=("12345", "6789"), expected=str(12345 * 6789)),
    # multi: several tools in sequence
    Task("multi-city-time", "multi",
         "Ask me which city I am in, then tell me the current local time there as HH:MM.",
         about_now(_hhmm, tz="Europe/Paris"), human=("I'm in Paris.",), expected="time in Europe/Paris"),
    Task("multi-weekday-in-1000-days", "multi",
         "What day of the week will it be 1000 days after today (UTC)?",
         about_now(lambda t: (t + timedelta(days=1000)).strftime("%A")), expected="weekday of today + 1000"),
    Task("multi-minutes-to-midnight", "multi",
         "How many whole minutes are left until midnight UTC tonight?",
         number_about_now(lambda t: (24 * 60 - t.hour * 60 - t.minute), tolerance=2),
         expected="minutes until 00:00 UTC"),
    # recover: the first natural tool call fails, and the model has to change course
    Task("recover-bad-zone", "recover",
         "What time is it in the time zone 'Mars/Olympus_Mons'? If that zone does not exist, "
         "tell me the current UTC time instead, as HH:MM.",
         about_now(_hhmm), expected="UTC time"),
    Task("recover-bad-import", "recover",
         "Run this Python code and tell me what it prints: import mathx; print(round(mathx.pi, 5)). "
         "If it fails, fix the code and tell me what the fixed code prints.",
         has_number(3.14159, 0.000001), expected="3.14159"),
    Task("recover-old-zone-name", "recover",
         "What is the current hour (0-23) in the time zone 'Asia/Bombay_City'? If that name is "
         "not valid, use the correct IANA time zone for Mumbai.",
         number_about_now(lambda t: t.hour, tz="Asia/Kolkata"), expected="the hour in Asia/Kolkata"),
]


def all_of(*checks: Checker) -> Checker:
    def check(answer: str, clock: Clock) -> bool:
        return all(c(answer, clock) for c in checks)
    return check


from . import embedding as _e  # noqa: E402  (after the checkers it does not need)

TASKS += [
    # embed: the agent inside a script, with the script's own tools
    Task("embed-typed-part", "embed",
         "Look up part QX-4417 in the warehouse and give me its bin and quantity.",
         all_of(has_text("R7-12"), has_number(318)), embed=_e.typed_part,
         expected='{"bin": "R7-12", "quantity": 318}'),
    Task("embed-denied-delete", "embed",
         "Delete the stale report q3-draft.txt, then tell me whether it was deleted.",
         has_text("not", "denied", "declin", "refus", "wasn't", "was unable", "could not"),
         embed=_e.denied_delete, expected="not deleted (the person refuses the call)"),
    Task("embed-booking-format", "embed",
         "Book the room Orion for 2027-03-05 and tell me the confirmation code.",
         has_text("ORI-5521"), embed=_e.booking_format,
         expected="ORI-5521 (the tool wants the date as 05.03.2027)"),
    Task("embed-chained-orders", "embed",
         "What is the total, in euros, of all open orders of the customer Brannock Vale?",
         has_number(500.5, 0.001), embed=_e.chained_orders, expected="500.5"),
    Task("embed-asked-budget", "embed",
         "Ask me which project I mean, then tell me that project's budget.",
         has_number(73210), human=("Project Tamsin.",), embed=_e.asked_budget,
         expected="73210"),
    Task("embed-picked-flight", "embed",
         "Which is the cheapest flight from Vellmar to Ostrid today that leaves after 10:00? "
         "Give its flight number.",
         has_text("OS 902", "OS902"), embed=_e.picked_flight, expected="OS 902"),
]


WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def only_text(right: str, wrong: tuple[str, ...]) -> Checker:
    """The answer names `right` and none of the `wrong` options (a list of every candidate
    is no answer)."""
    def check(answer: str, clock: Clock) -> bool:
        low = str(answer).lower()
        return right.lower() in low and not any(w.lower() in low for w in wrong)
    return check


def first_named(right: str, options: tuple[str, ...]) -> Checker:
    """Of the options, the answer names `right` first (the reasons for not picking the others
    may follow)."""
    def check(answer: str, clock: Clock) -> bool:
        low = str(answer).lower()
        found = sorted((low.find(o.lower()), o) for o in (right, *options) if o.lower() in low)
        return bool(found) and found[0][1] == right
    return check


def json_fields(**wanted: Any) -> Checker:
    """A typed answer (as JSON) whose fields hold these values; a number within 0.01."""
    def check(answer: str, clock: Clock) -> bool:
        import json

        try:
            data = json.loads(answer)
        except ValueError:
            return False
        if not isinstance(data, dict):
            return False
        for key, value in wanted.items():
            got = data.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if isinstance(got, bool) or not isinstance(got, (int, float)) \
                        or not math.isclose(got, value, abs_tol=0.01, rel_tol=0):
                    return False
            elif str(got).strip().lower() != str(value).lower():
                return False
        return True
    return check


from . import embedding_gap as _g  # noqa: E402

TASKS += [
    # embed, of the kinds the server path missed (issue 37): computed numbers, sums of two
    # lookups, the one tool that knows, the person asked once, picking from structured data
    Task("embed-contract-weekday", "embed",
         "Look up contract K-5190 and tell me which day of the week falls 100 days after its "
         "start date.",
         only_text("Saturday", tuple(d for d in WEEKDAYS if d not in ("Saturday", "Thursday"))),
         embed=_g.contract_weekday, expected="Saturday (2027-02-11 + 100 days = 2027-05-22)"),
    Task("embed-contract-term", "embed",
         "How many days does contract K-17 run, from its signing to its end date?",
         has_number(289), embed=_g.contract_term, expected="289 (2026-11-18 to 2027-09-03)"),
    Task("embed-two-stores", "embed",
         "How many units of item SK-3308 do the Dunmore and Kestrel Quay warehouses hold "
         "together?", has_number(2251), embed=_g.two_stores, expected="2251 (1284 + 967; not 2663, all three)"),
    Task("embed-currency-total", "embed",
         "What is the total of order H-2207 in US dollars, rounded to cents?",
         has_number(172.41, 0.011), embed=_g.currency_total, expected="172.41 (1840 NOK x 0.0937)"),
    Task("embed-sla-share", "embed",
         "Look up the Q2 support ticket figures and tell me what percentage of the tickets "
         "closed in Q2 were closed within the SLA, to one decimal place.", has_number(85.3, 0.051), embed=_g.sla_share,
         expected="85.3 (157 of 184)"),
    Task("embed-depot-cutoff", "embed",
         "What is the same-day dispatch cut-off time at the Lindqvist depot?",
         has_text("14:45", "2:45"), embed=_g.depot_cutoff,
         expected="14:45 (only depot_schedule has it)"),
    Task("embed-asked-leave", "embed",
         "Ask me for my employee number, then tell me how many days of leave I have left "
         "this year.", has_number(16), human=("It's E-4471.",), embed=_g.asked_employee,
         expected="16 (25 allowed - 9 taken)"),
    Task("embed-picked-supplier", "embed",
         "Which supplier quotes the lowest unit price for steel bolts among those that deliver "
         "within 5 days? Give the supplier's name.",
         first_named("Cobb", ("Norrby", "Arkwell", "Tarrow")), embed=_g.picked_supplier,
         expected="Cobb & Daughters"),
    Task("embed-typed-invoice", "embed",
         "Summarise invoice INV-8841: its number, how many lines it has, and its total in euros.",
         json_fields(invoice="INV-8841", lines=3, total_eur=146.3), embed=_g.typed_invoice,
         expected='{"invoice": "INV-8841", "lines": 3, "total_eur": 146.3}'),
    Task("embed-approved-refund", "embed",
         "Order O-5512 was returned: refund the customer what they paid, then tell me the "
         "refund's reference.", has_text("RF-10417"), embed=_g.approved_refund,
         expected="RF-10417 (a refund of 64.9 EUR, which the person approves)"),
]


def scripted_human(task: Task) -> Callable[[str], str]:
    """The person: answers from the task's script in order, then says they cannot help."""
    answers = list(task.human)

    def answer(question: str) -> str:
        return answers.pop(0) if answers else NO_HUMAN_REPLY

    return answer


def now_utc() -> datetime:
    return datetime.now(UTC)
