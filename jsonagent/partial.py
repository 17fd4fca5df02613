"""Reading a reply while it is written: raw pieces in, what became known out.

A reader is fed the pieces a backend hands to `on_delta` and returns, for each piece, the
deltas that piece made certain: thought text, the tool's name once its string has closed,
and the raw text of the arguments. A delta is never taken back, so a reader holds text back
until nothing that follows can change it (an escape half read, trailing blanks, a word that
may turn into `Final Answer:`). What the envelope makes of the whole reply stays the truth:
a repaired or re-asked reply is said so by the event that follows it.

    reader = reader_for()           # JSON or the ReAct text style, told apart by the reply
    for piece in pieces:
        for kind, value in reader.feed(piece): ...   # ("thought"|"tool"|"args", str)
"""

from __future__ import annotations

import json
import re

from .dialects import INLINE_FINAL, MARKER

Delta = tuple[str, str]
"""("thought", text) | ("tool", name) | ("args", raw JSON text)."""

_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_WS = " \t\r\n"


def reader_for() -> "AnyReader":
    return AnyReader()


class AnyReader:
    """JSON when the reply opens with `{` (or a fence, or a `<think>` block before it);
    the ReAct text style when it opens with anything else."""

    def __init__(self) -> None:
        self._inner: JsonReader | ReactReader | None = None
        self._head = ""

    def feed(self, piece: str) -> list[Delta]:
        if self._inner is None:
            self._head += piece
            start = self._head.lstrip()
            if not start or start.startswith("<") and not start.startswith("<think>") \
                    and len(start) < 7:
                return []
            json_like = start[0] in "{`[" or start.startswith("<think>")
            self._inner = JsonReader() if json_like else ReactReader()
            piece, self._head = self._head, ""
        return self._inner.feed(piece)


class JsonReader:
    """The top-level object's `thought`, `tool_name` and `args_list`, wherever they stand."""

    def __init__(self) -> None:
        self._state = "start"  # start, key?, key, colon, value?, value, after, done
        self._raw = ""        # the key, or the tool name, as raw JSON text
        self._key = ""
        self._kind = ""       # thought, tool, args, skip
        self._depth = 0
        self._in_string = False
        self._escape = ""     # an escape of the thought, read so far (with its backslash)
        self._high = ""       # a high surrogate waiting for its low half
        self._scalar = False

    def feed(self, piece: str) -> list[Delta]:
        out: list[Delta] = []
        thought: list[str] = []
        args: list[str] = []
        for ch in piece:
            state = self._state
            if state == "done":
                break
            if state == "start":
                if ch == "{":
                    self._state = "key?"
            elif state == "key?":
                if ch == '"':
                    self._state, self._raw = "key", '"'
                elif ch == "}":
                    self._state = "done"
            elif state == "key":
                self._raw += ch
                if self._escape:
                    self._escape = ""
                elif ch == "\\":
                    self._escape = "\\"
                elif ch == '"':
                    self._key = _loads(self._raw)
                    self._state = "colon"
            elif state == "colon":
                if ch == ":":
                    self._state = "value?"
            elif state == "value?":
                if ch in _WS:
                    continue
                self._start_value(ch, args)
            elif state == "value":
                if self._kind == "thought":
                    self._thought_char(ch, thought)
                else:
                    self._value_char(ch, args, out)
            elif state == "after":
                if ch == ",":
                    self._state = "key?"
                elif ch == "}":
                    self._state = "done"
        if thought:
            out.insert(0, ("thought", "".join(thought)))
        if args:
            out.append(("args", "".join(args)))
        return out

    def _start_value(self, ch: str, args: list[str]) -> None:
        kind = {"thought": "thought", "tool_name": "tool", "args_list": "args"}.get(self._key, "skip")
        if kind in ("thought", "tool") and ch != '"':
            kind = "skip"  # not a string: nothing to show as it comes
        self._kind, self._state, self._depth = kind, "value", 0
        self._in_string, self._escape, self._scalar = False, "", False
        if kind == "thought":
            return
        if kind == "tool":
            self._raw = '"'
            self._in_string = True
            return
        if kind == "args":
            args.append(ch)
        if ch == '"':
            self._in_string = True
        elif ch in "{[":
            self._depth = 1
        else:
            self._scalar = True

    def _value_char(self, ch: str, args: list[str], out: list[Delta]) -> None:
        """A character of a value that is not the thought: followed to its end."""
        if self._scalar:
            if ch in ",}" or ch in _WS:
                self._state = "after"
                self._after(ch)
                return
        elif self._in_string:
            if self._kind == "tool":
                self._raw += ch
            if self._escape:
                self._escape = ""
            elif ch == "\\":
                self._escape = "\\"
            elif ch == '"':
                self._in_string = False
                if self._depth == 0:
                    self._state = "after"
                    if self._kind == "tool":
                        name = _loads(self._raw)
                        if isinstance(name, str):
                            out.append(("tool", name))
        elif ch == '"':
            self._in_string = True
        elif ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            if self._depth == 0:
                self._state = "after"
        if self._kind == "args":
            args.append(ch)

    def _after(self, ch: str) -> None:
        if ch == ",":
            self._state = "key?"
        elif ch == "}":
            self._state = "done"

    def _thought_char(self, ch: str, out: list[str]) -> None:
        if self._escape:
            self._escape += ch
            esc = self._escape
            if esc[1] != "u":
                self._escape = ""
                self._emit(_SIMPLE.get(ch, ch), out)
            elif len(esc) == 6:
                self._escape = ""
                try:
                    self._emit(chr(int(esc[2:], 16)), out)
                except ValueError:  # not hex: the envelope will say what it makes of it
                    self._state = "done"
        elif ch == "\\":
            self._escape = "\\"
        elif ch == '"':
            if self._high:
                out.append(self._high)
                self._high = ""
            self._state = "after"
        else:
            self._emit(ch, out)

    def _emit(self, ch: str, out: list[str]) -> None:
        """A character of the thought; a surrogate pair becomes one character, as json does."""
        if self._high:
            high, self._high = self._high, ""
            if "\udc00" <= ch <= "\udfff":
                out.append(chr(0x10000 + ((ord(high) - 0xD800) << 10) + (ord(ch) - 0xDC00)))
                return
            out.append(high)
        if "\ud800" <= ch <= "\udbff":
            self._high = ch
        else:
            out.append(ch)


_FINAL_WORDS = "final answer:"
_MAYBEMARKER_WORDS = ("thought", "action input", "action", "observation", "final answer",
                       "answer", "pause")


class ReactReader:
    """`Thought:` text as it is written, until the first line that is not thought."""

    def __init__(self) -> None:
        self._lines: list[str] = []   # the thought's complete lines
        self._partial = ""            # the line being written
        self._in_thought = False
        self._done = False
        self._sent = ""

    def feed(self, piece: str) -> list[Delta]:
        if self._done:
            return []
        self._partial += piece
        *complete, self._partial = self._partial.split("\n")
        for line in complete:
            self._line(line)
            if self._done:
                break
        return self._send(self._so_far())

    def _line(self, line: str) -> None:
        m = MARKER.match(line)
        if m is None:
            if self._in_thought or (not self._lines and line.strip()):
                self._in_thought = True
                self._lines.append(line)
            return
        key = (m["key"] or m["pause"]).lower()
        if key == "thought":
            self._in_thought = True
            self._lines.append(line[m.end():])
        else:
            self._in_thought, self._done = False, True

    def _so_far(self) -> str:
        lines = list(self._lines)
        line = self._partial
        if not self._done and line:
            m = MARKER.match(line)
            if m is not None and (m["key"] or "").lower() == "thought" or m is None and self._in_thought \
                    and not _may_be_marker(line):
                lines.append(line[m.end():] if m is not None else line)
        text = "\n".join(lines)
        final = INLINE_FINAL.search(text)
        if final is not None:
            text, self._done = text[:final.start()], True
        elif not self._done:
            text = _without_final_start(text)
        return text.strip()

    def _send(self, text: str) -> list[Delta]:
        if not text.startswith(self._sent) or len(text) == len(self._sent):
            return []
        piece, self._sent = text[len(self._sent):], text
        return [("thought", piece)]


def _may_be_marker(line: str) -> bool:
    """A line still short enough to turn into a marker line."""
    bare = line.lstrip(">*- \t").lstrip("*").lower()
    return any(w.startswith(bare) for w in _MAYBEMARKER_WORDS) or MARKER.match(line) is not None


def _without_final_start(text: str) -> str:
    """The text without a tail that may still become ` Final Answer:`."""
    for at in range(max(0, len(text) - 20), len(text)):
        if text[at] in _WS:
            tail = re.sub(r"\s+", " ", text[at + 1:].lstrip("*").lower())
            if tail and _FINAL_WORDS.startswith(tail):
                return text[:at]
    return text


def _loads(raw: str):
    try:
        return json.loads(raw)
    except ValueError:
        return None


_THOUGHT = re.compile(r'"thought"\s*:\s*"((?:[^"\\]|\\.)*)(\\?)("?)', re.S)
_ESCAPE = re.compile(r'\\u[0-9a-fA-F]{4}|\\.')
"""One escape, the one character it stands for (a `\\u00e9` is one, not six)."""
_HALF_ESCAPE = re.compile(r'\\u[0-9a-fA-F]{0,3}$')
"""A `\\u` escape still being written: not a character yet."""
_THOUGHT_WITHIN = 400
"""A JSON step opens with its thought; a reply that shows none this far in has no thought
to watch (the ReAct text style, or a step written in another order)."""


class ThoughtTooLong(BaseException):
    """Raised from `on_delta` to stop the reply being written. A BaseException, like
    Cancelled, so that a backend's `except Exception` around its stream lets it through."""


class ThoughtCap:
    """Stops a reply once its thought passes `cap` characters. Constrained decoding keeps
    the thought within the schema's maxLength in process; a server's grammar may ignore it,
    and object mode has none, and a small model then writes one clause over and over until
    the token limit (3,534 tokens in 109 s on the 135M model). Feed it the pieces (as
    `on_delta`); `text` is what was written."""

    def __init__(self, cap: int) -> None:
        self.cap, self.text, self.tripped = cap, "", False
        self._watching = True
        self._at: int | None = None
        """Where the top-level thought's key starts, once found."""

    def feed(self, piece: str) -> None:
        self.text += piece
        if not self._watching:
            return
        found = _THOUGHT.match(self.text, self._at) if self._at is not None else self._find()
        if found is None:
            self._watching = len(self.text) < _THOUGHT_WITHIN
            return
        self._at = found.start()
        # measured before it is closed: a piece that closes a thought past the cap (or a
        # whole reply, fed at once) trips it too
        if len(_ESCAPE.sub("x", _HALF_ESCAPE.sub("", found.group(1)))) > self.cap:
            self.tripped = True
            raise ThoughtTooLong
        if found.group(3):  # the thought has closed
            self._watching = False

    def _find(self) -> re.Match | None:
        """The step's own thought: a "thought" key of the top-level object, not one inside
        the arguments."""
        for found in _THOUGHT.finditer(self.text):
            if _depth(self.text, found.start()) == 1:
                return found
        return None


def _depth(text: str, end: int) -> int:
    """How many objects and arrays are open at `end`, strings skipped."""
    depth, in_string, escaped = 0, False, False
    for ch in text[:end]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return depth
