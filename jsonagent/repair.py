"""Repairs of a reply that is not the JSON step it should be: the object found in prose, a
code fence or a <think> block, triple-quoted strings, truncated or broken JSON, and keys under
other names. Each repair is recorded by name; what cannot be repaired is a ReplyProblem.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from .reply import ENVELOPE_KEYS, ReplyProblem
from .tools.schema import got, short_json

KEY_ALIASES = {
    "tool_name": ("action", "name", "tool", "function", "tool_call", "toolname"),
    "args_list": ("arguments", "args", "action_input", "parameters", "params", "input",
                  "tool_input", "args_dict", "argument"),
    "thought": ("thoughts", "reasoning", "thinking", "reason", "rationale"),
}
_ENVELOPE = frozenset(ENVELOPE_KEYS)

_FENCE = re.compile(r"```[A-Za-z0-9_-]*\s*\n?(.*?)(?:```|$)", re.S)
THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S | re.I)
_MAX_STARTS = 50
# Code-tuned models write multi-line code as a Python triple-quoted string inside the JSON
_TRIPLE_QUOTED = re.compile(r'("""|\'\'\')(.*?)\1', re.S)

NOT_JSON = object()
"""What `strict` is for a text that did not parse as strict JSON."""

CLOSED = "closed_truncated_json"
"""The repair that closed an object the text never closed: a reply that was cut, whose
call is never run (envelope.parse_reply)."""

GUESSES = frozenset({"extracted_object", "code_quotes_escaped", "triple_quoted_string"})
"""The repairs that chose where a reply's object ends: after one, a reply cut at its cap may
hold more than the object read (a second call, cut), so it is not whole (envelope)."""


def load_object(text: str, repairs: list[str], strict: Any = NOT_JSON) -> Any:
    """`strict`: the text already parsed as strict JSON, if it did."""
    data = strict
    if data is NOT_JSON:
        data = _repair(text or "", repairs)
        if isinstance(data, ReplyProblem):
            return data
    if isinstance(data, list) and len(data) >= 1 and isinstance(data[0], dict):
        if len(data) > 1:
            repairs.append("kept_first_of_many")
        repairs.append("unwrapped_list")
        data = data[0]
    if not isinstance(data, dict):
        return ReplyProblem("json", f"/: expected a JSON object, got {got(data)}", repairs)
    return data


def _repair(text: str, repairs: list[str], unquote: bool = True) -> Any:
    body = text
    if THINK.search(body):
        body = THINK.sub("", body)
        repairs.append("stripped_think")
    fence = _FENCE.search(body)
    if fence and "{" in fence.group(1):
        body = fence.group(1)
        repairs.append("stripped_code_fence")
    starts = [i for i, c in enumerate(body) if c == "{"][:_MAX_STARTS]
    if not starts:
        shown = text.strip()
        return ReplyProblem("json", "expected a JSON object, got "
                            + (f"text {short_json(shown)}" if shown else "an empty reply"))
    # Prose may hold braces of its own: the first top-level {...} that parses as it stands
    # wins; one nested inside an earlier candidate is never a candidate itself.
    end = 0
    for start in starts:
        if start < end:
            continue
        obj, closed = _first_object(body, start)
        end = start + len(obj)
        try:
            data = json.loads(obj)
        except RecursionError:  # maybe valid JSON: calling it invalid would mislead the model
            return ReplyProblem("json", "the JSON is nested deeper than it can be read (about "
                                f"{sys.getrecursionlimit():,} levels); write it with fewer levels",
                                repairs)
        except ValueError:
            continue
        if isinstance(data, dict):
            if body[:start].strip() or body[start + len(obj):].strip():
                repairs.append("extracted_object")
            return data
    if unquote and _TRIPLE_QUOTED.search(body):
        # Only now: inside a string of JSON that parses, triple quotes are text and must stay
        inner: list[str] = []
        data = _repair(_TRIPLE_QUOTED.sub(lambda m: json.dumps(m.group(2), ensure_ascii=False), body),
                       inner, unquote=False)
        if not isinstance(data, ReplyProblem):
            repairs += ["triple_quoted_string", *inner]
            return data
    quoted = _code_quotes(body[starts[0]:])
    if isinstance(quoted, ReplyProblem):  # never let json_repair guess where such code ends
        return ReplyProblem(quoted.stage, quoted.message, repairs)
    if quoted is not None:
        if body[:starts[0]].strip():
            repairs.append("extracted_object")
        repairs.append("code_quotes_escaped")
        return quoted
    obj, closed = _first_object(body, starts[0])
    if body[:starts[0]].strip() or body[starts[0] + len(obj):].strip():
        repairs.append("extracted_object")
    import json_repair

    try:
        data = json_repair.loads(obj)
    except Exception:  # the repairer has its own failure modes, RecursionError among them
        data = None
    if not isinstance(data, dict) or not data:
        return ReplyProblem("json", f"invalid JSON that could not be repaired: {short_json(obj, 60)}",
                            repairs)
    repairs.append("json_repair" if closed else CLOSED)
    return data


_CODE_OPENS = re.compile(r'"code"\s*:\s*"')
# where a code string may close: the step ends, or another key or the envelope goes on
_CODE_CLOSES = re.compile(r'"\s*(?:\}\s*\}\s*$|\}\s*,\s*"|,\s*"\w+"\s*:)')
_UNESCAPED_QUOTE = re.compile(r'(?<!\\)((?:\\\\)*)"')


def _code_quotes(text: str) -> dict | ReplyProblem | None:
    """A step whose JSON broke on a `"` left unescaped in its code (`print("hi")` written
    into the string as it stands), read again with those quotes escaped: the step, when
    some place the string may close at gives JSON that parses and code that compiles; a
    problem that says so, when none does; None when the code holds no such quote."""
    opened = _CODE_OPENS.search(text)
    if opened is None:
        return None
    start, tried = opened.end(), False
    closes = [m.start() for m in _CODE_CLOSES.finditer(text, start)]
    for end in reversed(closes):  # the last close leaves the most code: try it first
        raw = text[start:end]
        if not _UNESCAPED_QUOTE.search(raw):
            continue
        tried = True
        try:
            data = json.loads(text[:start] + _UNESCAPED_QUOTE.sub(r'\1\\"', raw) + text[end:])
            code = data["args_list"]["code"]
            compile(code, "<cell>", "exec")
        except (ValueError, KeyError, TypeError, SyntaxError, RecursionError):
            continue
        return data if isinstance(data, dict) else None
    if not tried:
        return None
    return ReplyProblem("json", 'invalid JSON: the code in args_list.code holds a " that ends '
                        'its string early, and no reading of it compiles; write every " '
                        'inside the code as \\" (or use \' for Python strings)')


def ends_the_text(text: str) -> bool:
    """Whether the first object in `text` is where it ends: nothing but blanks or a code
    fence's close after it (a <think> block aside)."""
    body = THINK.sub("", text or "")
    start = body.find("{")
    if start < 0:
        return False
    obj, closed = _first_object(body, start)
    return closed and body[start + len(obj):].strip() in ("", "```")


def closes(text: str) -> bool:
    """Whether the object that opens `text` is closed in it (its strings honoured)."""
    return _first_object(text, 0)[1]


def _first_object(text: str, start: int) -> tuple[str, bool]:
    """The first balanced {...} from `start`, honouring strings; the rest if it never closes."""
    depth, quote, escaped = 0, None, False
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1], True
    return text[start:], False


def fix_keys(data: dict[str, Any], repairs: list[str]) -> dict[str, Any]:
    if data.keys() == _ENVELOPE and isinstance(data["args_list"], dict):
        return data  # nothing to fix, as in every reply under a schema
    data = dict(data)
    # {"function": {"name": ..., "arguments": ...}}: an OpenAI tool call in our envelope's place
    inner = data.get("function") if isinstance(data.get("function"), dict) else None
    if inner is not None and "tool_name" not in data:
        data.pop("function")
        data = {**inner, **data}
        repairs.append("unwrapped_function_call")
    for key, aliases in KEY_ALIASES.items():
        if key in data:
            continue
        for alias in aliases:
            if alias in data and not (alias == "name" and isinstance(data[alias], dict)):
                data[key] = data.pop(alias)
                repairs.append(f"alias:{alias}->{key}")
                break
    if isinstance(data.get("args_list"), str):
        try:
            parsed = json.loads(data["args_list"])
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            data["args_list"] = parsed
            repairs.append("args_list_from_string")
    if "tool_name" not in data:
        return data
    if "thought" not in data:
        data["thought"] = ""
        repairs.append("missing_thought")
    extra = {k: data.pop(k) for k in list(data) if k not in ENVELOPE_KEYS}
    if data.get("args_list") in (None, {}) and extra:
        # {"tool_name": "t", "city": "Oslo"}: the arguments sit beside the envelope
        data["args_list"] = extra
        repairs.append("args_from_top_level:" + ",".join(extra))
    else:
        if data.get("args_list", None) is None:
            data["args_list"] = {}
            repairs.append("empty_args_list")
        if extra:
            repairs.append("dropped_keys:" + ",".join(extra))
    return data
