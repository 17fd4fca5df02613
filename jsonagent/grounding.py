"""Answers grounded in what the run saw.

Before a run accepts its final answer, each number and each date in it (in the text, and
each numeric field of a typed answer) is looked for in what the run saw: the questions,
every tool result and every answer from the person, read from the run's own history. One found
nowhere gets one nudge, as the final call's observation; the model then computes it, or
calls the final tool again, which confirms it. Small models work figures out in their head
(a sum of two looked-up figures, a date 100 days ahead), and through a server the 1.5B model
did so in 2 of the 5 tasks it missed (issue 37).

What counts as seen, so that a right answer is not nudged:
- any reading of the number (numbers.py: `48k` is 48,000 or 48), to the precision it is
  written in: `3.14` is seen in 3.14159, `1.5 million` in 1,523,406; a whole number needs
  the whole number (`400` is not seen in 391);
- integers from 0 to 10: counts, list positions, "2 of them";
- one arithmetic step (+, -, x, /) from two numbers seen (for a number written to the
  unit or finer; a rounded one, `48 thousand`, must round one seen), or from one and a constant
  (1-10, 12, 24, 60, 100, 1000), never two constants: a total of two looked-up figures, a
  percentage, a date a week on; and as one step too, a change between two seen as a share
  (8.1% from 48,213 to 52,100) and one's share of their total. More steps take code, and
  what code prints is seen, but not a number or a date the cell wrote itself:
  `print(1258626907159)` after a nudge is the model's own figure again (the 1.5B model,
  asked for the 50th Fibonacci number, in round 14), and the nudge then says that printing
  a number does not compute it. Past MAX_OPERANDS (seen.py) numbers seen, only
  steps with a constant count, or pairs of so many numbers would cover nearly any figure by
  chance;
- a time of day's hours and minutes, and a date's month and day, and one step adding to or
  taking from them (21 in Tokyo when it is 12:33 in London, 35 minutes from 14:15 to
  14:50), but not one that scales them: 720 minutes from 12:33 is the small model's
  mistake for "minutes to midnight", and a duration from a clock takes code;
- a date (dates.py) is checked as a date, not as its parts: it is seen when it is a day
  seen, or a number of days, months or years seen away from one (a contract's end 30 days
  after its start), or up to a week, or a month, a quarter, half a year or a year, away; a
  date 100 days from today is not seen unless 100 was, nor 2027-01-28 on 2026-11-28;
- a number named in the nudge of the step just before: the model confirmed it by calling the
  final tool again at once. After other calls in between, the answer is checked afresh,
  against what those showed too: the 1.5B model had code print 2027-03-07, then gave its
  2027-01-17 again, which one nudge had let through as confirmed;
- after MAX_NUDGES nudges in a run, whatever the answer says: the check is a prompt to
  compute, not a judge.

A nudge after a code cell ran and printed a number or a date also repeats what that last
cell printed (its last PRINTED characters), unless a number held back was an echo of the
cell's own: the output is right above, yet through a server the 1.5B model had code print
2027-03-07 and then gave, twice, the 2027-01-17 the nudge named (round 16).

What is not a source: the system prompt and tool descriptions, the model's own replies and
arguments (code it wrote included: only what the code printed counts), and the final
tool's own observations (the nudges).
"""

from __future__ import annotations

import ast
import functools
import json
from datetime import date
from typing import Any, Iterable, Iterator, NamedTuple

from . import dates
from .dates import DateMention
from .notes import note, template_of
from .numbers import Mention, in_data, in_text
from .seen import Seen
from .state import RunState, StepRecord
from .tools.core import CODE_TOOL

SMALL = 10
"""Integers up to this are never nudged."""
MAX_NUDGES = 2
SHOWN = 3
"""Numbers a nudge names; the rest are left out of its words (all are recorded)."""
PRINTED = 160
"""Characters of a code cell's output a nudge repeats."""
_CODE_OUTPUT = ("stdout", "stderr")


def nudge(state: RunState, record: StepRecord, final: str, tools: Iterable[str]) -> dict | None:
    """The observation for a final call whose answer has numbers or dates nothing in the run
    shows, or None to accept it. `final` names the final tool, `tools` every tool of the run."""
    earlier = [s.observation for s in state.steps if s is not record and s.tool == final
               and isinstance(s.observation, dict) and "unconfirmed" in s.observation]
    if len(earlier) >= MAX_NUDGES:
        return None
    told = _just_told(state, record, final)
    confirmed = {v for text in told for m in in_text(text) for v in m.values}
    confirmed_days = {d for text in told for m in dates.in_text(text) for d in m.days}
    numbers, days = answer_mentions(record.args)
    found: Sources | None = None
    unseen: dict[str, Mention | DateMention] = {}
    for mention in numbers:
        if _small(mention) or confirmed.intersection(mention.values) or mention.text in unseen:
            continue
        found = found or sources(state, final)
        if not found.seen.shows(mention):
            unseen[mention.text] = mention
    for day in days:
        if confirmed_days.intersection(day.days) or day.text in unseen:
            continue
        found = found or sources(state, final)
        if not found.seen.shows_day(day):
            unseen[day.text] = day
    if not unseen:
        return None
    names = list(unseen)
    shown = names[:SHOWN]
    shown = (", ".join(shown[:-1]) + " and " if len(shown) > 1 else "") + shown[-1] + \
        (" (and more)" if len(names) > SHOWN else "")
    key = "answer_unseen" if CODE_TOOL in tools else "answer_unseen_no_code"
    echoed = [m for m in unseen.values() if found.echoed(m)]
    if CODE_TOOL in tools and len(echoed) == len(unseen):
        key = "answer_echoed"  # "compute it" again is answered with the echo again
    text = note(key, numbers=shown, it="it" if len(names) == 1 else "them", final=final,
                code=CODE_TOOL)
    # The last cell's output is right above, yet the 1.5B model took its figure from the
    # nudge's words; an echo's output is the figure being held back.
    printed = None if echoed else _last_printed(state, record)
    if printed:
        text += " " + note("answer_printed", printed=printed)
    return {"error": text, "unconfirmed": names}


def _last_printed(state: RunState, record: StepRecord) -> str | None:
    """What the run's last code cell before `record` printed, when that cell ran and printed
    a number or a date (its last PRINTED characters)."""
    for step in reversed(state.steps):
        for call in reversed(step.calls if step is not record else []):
            if call.tool != CODE_TOOL:
                continue
            obs = call.observation if isinstance(call.observation, dict) else {}
            out = obs.get("stdout")
            if obs.get("exit_code") != 0 or not isinstance(out, str) or not out.strip():
                return None
            out = " ".join(out.split())
            if len(out) > PRINTED:  # from a whole word: a cut number is a figure never printed
                out = "..." + out[-PRINTED:].split(" ", 1)[-1]
            return out if in_text(out) or dates.in_text(out) else None
    return None


def _just_told(state: RunState, record: StepRecord, final: str) -> list[str]:
    """What the nudge of the step right before `record` named, if that step was one. One
    step back is enough while MAX_NUDGES is 2: a third answer is taken whatever it says."""
    steps = state.steps
    at = next((i for i in range(len(steps) - 1, -1, -1) if steps[i] is record), len(steps))
    before = steps[at - 1] if at > 0 else None
    if before is None or before.tool != final or not isinstance(before.observation, dict):
        return []
    return [str(text) for text in before.observation.get("unconfirmed", ())]


def held_back(record: StepRecord) -> bool:
    """Whether the step is a final answer this check held back."""
    obs = record.calls[0].observation
    return len(record.calls) == 1 and isinstance(obs, dict) and "unconfirmed" in obs


def answer_mentions(args: dict[str, Any]) -> tuple[list[Mention], list[DateMention]]:
    """The numbers and the dates of a final call's arguments: in its text and its numeric
    fields. A date's parts are not numbers of their own."""
    numbers: list[Mention] = []
    found: list[DateMention] = []
    for leaf in _leaves(args):
        if isinstance(leaf, str):
            here = dates.in_text(leaf)
            found.extend(here)
            numbers.extend(in_text(dates.without(leaf, here)))
        else:
            numbers.extend(in_data(leaf))
    return numbers, found


class Sources(NamedTuple):
    """What the run saw, and what a code cell printed only as its code wrote it."""
    seen: Seen
    echoed_values: set[float]  # printed by a cell only as its code wrote them (_written)
    echoed_days: set[int]

    def echoed(self, mention: Mention | DateMention) -> bool:
        if isinstance(mention, DateMention):
            return bool(self.echoed_days.intersection(mention.days))
        return bool(self.echoed_values.intersection(mention.values))


def sources(state: RunState, final: str) -> Sources:
    """What the run saw, from its history: the numbers, the days and the clock readings (a
    time of day's hours, minutes and seconds) of the user's messages (the questions of this
    run and the session's earlier ones) and of every observation but the final tool's."""
    values: list[float] = []
    days: list[int] = []
    clock: list[float] = []
    echoed_values: set[float] = set()
    echoed_days: set[int] = set()
    for data, code in _seen_data(state, final):
        written, written_days = _written(code)
        found: list[int] = []
        for mention in in_data(_unclocked(data, found, clock)):
            if written.intersection(mention.values):
                echoed_values.update(mention.values)
            else:
                values.extend(mention.values)
        days.extend(d for d in found if d not in written_days)
        echoed_days.update(d for d in found if d in written_days)
    return Sources(Seen(values, days, clock), echoed_values, echoed_days)


def _written(code: str) -> tuple[set[float], set[int]]:
    """The numbers and the days a cell's code writes out itself: its constants and the dates
    in its strings, and a `date(2027, 1, 17)` of constants. Not its comments, nor what it
    compares or asserts a result against (a check the model was told to make). A time of
    day it prints is not told apart: its parts are too small to single out."""
    days: list[int] = []
    if not code:
        return set(), set()
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):  # it printed nothing, most likely
        return {v for m in in_data(_unclocked(code, days, [])) for v in m.values}, set(days)
    checks = {id(n) for node in ast.walk(tree) if isinstance(node, (ast.Compare, ast.Assert))
              for n in ast.walk(node)}
    values: set[float] = set()
    for node in ast.walk(tree):
        if id(node) in checks:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            values.update(v for m in in_text(_unclocked(node.value, days, [])) for v in m.values)
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            try:
                values.update(v for m in in_data(node.value) for v in m.values)
            except OverflowError:  # an int past a float's range: no answer writes it
                pass
        elif isinstance(node, ast.Call) and _callee(node) in ("date", "datetime"):
            parts = [a.value for a in node.args[:3] if isinstance(a, ast.Constant)]
            if len(parts) == 3 and all(type(x) is int for x in parts):
                try:
                    days.append(date(*parts).toordinal())
                except ValueError:
                    pass
    return values, set(days)


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def _unclocked(data: Any, days: list[int], clock: list[float]) -> Any:
    """`data` with the parts of the calendar and the clock in its strings taken out: its
    dates go to `days`, their month and day and a time of day's parts to `clock`; a date's
    year stays (an age is a year seen less another). A dict becomes its (key, value)
    pairs, so that two keys made alike keep both their values."""
    if isinstance(data, str):
        text = data
        for m in reversed(dates.in_text(data)):
            days.extend(m.days)
            found = [date.fromordinal(d) for d in m.days]
            clock.extend(float(x) for d in found for x in (d.month, d.day))
            text = f"{text[:m.start]} {found[0].year} {text[m.end:]}"
        text, parts = dates.clock_times(text)
        clock.extend(parts)
        return text
    if isinstance(data, dict):
        return [[_unclocked(key, days, clock), _unclocked(value, days, clock)]
                for key, value in data.items()]
    if isinstance(data, (list, tuple)):
        return [_unclocked(value, days, clock) for value in data]
    return data


def _seen_data(state: RunState, final: str) -> Iterator[tuple[Any, str]]:
    """What the run saw, each with the code of the cell that printed it ('' for the rest)."""
    cells: list[str] = []
    for message in state.messages:
        if message.role == "assistant":
            cells = _cells(message.content)
        elif message.role == "user":
            if not _a_nudge(message.content):
                yield message.content, ""
        elif message.role == "observation":
            code = cells.pop(0) if cells else ""  # a step's observations follow its calls' order
            try:
                body = json.loads(message.content)
            except ValueError:
                yield message.content, ""
                continue
            if not isinstance(body, dict) or body.get("tool_name") == final:
                continue
            response = body.get("response")
            if body.get("tool_name") != CODE_TOOL:
                code = ""
            elif isinstance(response, dict):
                response = [response.get(k) for k in _CODE_OUTPUT]  # what it printed
            yield response, code


def _cells(reply: str) -> list[str]:
    """The code of each call of a step as the history keeps it ('' for a call of another
    tool): one call's envelope, or several under `calls`."""
    try:
        step = json.loads(reply)
    except ValueError:
        return []
    calls = step.get("calls") if isinstance(step, dict) else None
    return [_code_of(call) for call in (calls if isinstance(calls, list) else [step])]


def _code_of(call: Any) -> str:
    """A call's code when it is a cell, else ''."""
    if not isinstance(call, dict) or call.get("tool_name") != CODE_TOOL:
        return ""
    args = call.get("args_list")
    code = args.get("code") if isinstance(args, dict) else None
    return code if isinstance(code, str) else ""


def _a_nudge(text: Any) -> bool:
    """Whether a user message is a nudge, of this run or an earlier one of the session: it
    stands in the history as the user's words, in its reply's place (acting.py)."""
    return isinstance(text, str) and any(
        text.startswith(head) and tail in text for head, tail in _nudge_parts())


@functools.lru_cache(maxsize=1)
def _nudge_parts() -> list[tuple[str, str]]:
    """Each nudge's words before its numbers, and after them up to its next field."""
    parts = []
    for key in ("answer_unseen", "answer_unseen_no_code", "answer_echoed"):
        head, rest = template_of(key).split("{numbers}", 1)
        parts.append((head, rest.split("{", 1)[0]))
    return parts


def _leaves(data: Any) -> Iterator[Any]:
    """The values of JSON data that are not containers (a dict's values, not its keys)."""
    if isinstance(data, dict):
        for value in data.values():
            yield from _leaves(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            yield from _leaves(value)
    else:
        yield data


def _small(mention: Mention) -> bool:
    return any(v <= SMALL and float(v).is_integer() for v in mention.values)
