"""The classic text protocols, read as input dialects of the step envelope.

- ReAct (the Qwen prompt): `Thought:` / `Action: NAME` / `Action Input: INPUT`, or
  `Final Answer: X`.
- PAUSE (Simon Willison's loop): `Thought:` / `Action: NAME: INPUT`, an optional `PAUSE`, or
  `Answer: X`.

This module only reads the text's structure; `envelope` looks the tool up, turns the input
into arguments and validates them. Every line number it reports counts from 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A marker opens a line, optionally in markdown bold or after a list dash or quote mark; never
# indented, so that a line of code inside an input (`    answer: int = 5`) stays code.
MARKER = re.compile(
    r"^(?:[>*-]+[ \t]*)?\**(?P<key>thought|action input|action|observation|final answer|answer)\**\s*:\**[ \t]?"
    r"|^[ \t*]*(?P<pause>pause)[ \t*.]*$",
    re.I)
INLINE_FINAL = re.compile(r"\s\**final answer\**\s*:\**\s*", re.I)
# `Action: NAME: INPUT` names a tool with a word, then a colon
_PAUSE_ACTION = re.compile(r"^`?(?P<name>[A-Za-z_][\w.\-]*)`?\s*:\s*(?P<input>.*)$", re.S)


@dataclass
class Action:
    """One call the text asks for; `final` for a final answer."""

    name: str
    input: str | None
    line: int
    final: bool = False


@dataclass
class Reading:
    dialect: str
    """react | pause"""
    thought: str
    action: Action | None
    repairs: list[str] = field(default_factory=list)
    ignored: list[Action] = field(default_factory=list)
    """Actions after the first: never run, and the model is told so."""
    dropped_observation: int | None = None
    """Line of the Observation the model wrote itself; it and what follows were dropped."""
    thought_line: int = 1


def read(text: str) -> Reading | None:
    """The reply's structure in either dialect. None when it has no marker line at all; a
    reading without an action when it has only thoughts."""
    sections = _sections(text)
    if not any(k in ("action", "final answer", "answer", "action input") for k, _, _ in sections):
        sections = _split_inline_final(sections)
        if not any(k == "final answer" for k, _, _ in sections):
            thought = next(((v, n) for k, v, n in sections if k == "thought"), None)
            if thought is None:
                return None
            return Reading("react", thought[0], None, thought_line=thought[1])
        repairs = ["final_answer_in_thought"]
    else:
        repairs = []
    dialect = "pause" if any(k in ("pause", "answer") for k, _, _ in sections) else "react"
    thoughts, actions, dropped = [], [], None
    for i, (key, value, line) in enumerate(sections):
        if key == "observation":
            if actions:
                dropped = line
                break
            continue  # an echo of the last observation before anything was asked
        if key in ("thought", None):
            if not actions and value:
                thoughts.append(value)
        elif key in ("final answer", "answer"):
            actions.append(Action("", value, line, final=True))
        elif key == "action":
            follows = sections[i + 1] if i + 1 < len(sections) else None
            if follows is not None and follows[0] == "action input":
                actions.append(Action(_bare_name(value), follows[1], line))
                continue
            pause = _PAUSE_ACTION.match(value)
            if pause:
                dialect, given = "pause", _strip_fence(pause["input"])
                actions.append(Action(pause["name"], given or None, line))
            else:
                actions.append(Action(_bare_name(value), None, line))
        elif key == "action input" and (i == 0 or sections[i - 1][0] != "action"):
            actions.append(Action("", value, line))  # an input with no name
    if dropped is not None:
        repairs.append("dropped_hallucinated_observation")
    if len(actions) > 1:
        repairs.append("ignored_extra_actions")
    reading = Reading(dialect, "\n".join(thoughts).strip(), actions[0] if actions else None,
                      repairs, actions[1:], dropped)
    reading.repairs.insert(0, f"dialect:{dialect}")
    return reading


def _sections(text: str) -> list[tuple[str | None, str, int]]:
    """(marker, text, line) per marker; continuation lines join the section above them.
    Text before the first marker is a section with marker None."""
    out: list[tuple[str | None, list[str], int]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        m = MARKER.match(line)
        if m:
            key = (m["key"] or m["pause"]).lower()
            out.append((key, [line[m.end():]] if m["key"] else [], n))
        elif out:
            out[-1][1].append(line)
        elif line.strip():
            out.append((None, [line], n))
    return [(k, _strip_fence("\n".join(lines)), n) for k, lines, n in out]


def _split_inline_final(sections):
    """`Thought: I know it now. Final Answer: 42` on one line: the answer inside the thought."""
    out = []
    for key, value, line in sections:
        m = INLINE_FINAL.search(value) if key == "thought" else None
        if m:
            out += [(key, value[:m.start()].strip(), line), ("final answer", value[m.end():].strip(), line)]
        else:
            out.append((key, value, line))
    return out


def _bare_name(value: str) -> str:
    """`[get_time]`, "`get_time`" or 'get_time.' all name get_time."""
    return value.strip().strip("`'\"[]().").strip()


def _strip_fence(value: str) -> str:
    value = value.strip()
    m = re.fullmatch(r"```[\w-]*\s*\n?(.*?)\n?```", value, re.S)
    return m.group(1).strip() if m else value
