"""The step protocol: raw model text in, a validated Step or a precise problem out.

Stages, in order: strict JSON, local repair, envelope validation, tool lookup,
argument validation. Every repair is named and counted; every problem is phrased
for the model to read on the re-ask.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .specs import _pointer, _short, json_type
from .toolset import Toolset

KEY_ALIASES = {
    "tool_name": ("action", "name", "tool", "function", "tool_call", "toolname"),
    "args_list": ("arguments", "args", "action_input", "parameters", "params", "input",
                  "tool_input", "args_dict", "argument"),
    "thought": ("thoughts", "reasoning", "thinking", "reason", "rationale"),
}
ENVELOPE_KEYS = ("thought", "tool_name", "args_list")


class Step(BaseModel):
    """One turn of the model: why, which tool, with what."""

    model_config = ConfigDict(extra="forbid")

    thought: str
    tool_name: str
    args_list: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), ensure_ascii=False)


@dataclass
class Parsed:
    step: Step
    repairs: list[str] = field(default_factory=list)


@dataclass
class ReplyProblem:
    """Why a reply was refused; `message` is what the model reads next."""

    stage: str
    """json | envelope | tool | args"""
    message: str
    repairs: list[str] = field(default_factory=list)

    def for_model(self, toolset: Toolset) -> str:
        return (f"Your last reply was rejected: {self.message}\n"
                'Reply with exactly one JSON object: {"thought": "...", "tool_name": "<one of '
                + ", ".join(toolset.names) + '>", "args_list": {...}}')


def parse_reply(text: str, toolset: Toolset) -> Parsed | ReplyProblem:
    repairs: list[str] = []
    data = _load(text, repairs)
    if isinstance(data, ReplyProblem):
        return data
    data = _fix_keys(data, repairs)
    try:
        step = Step.model_validate(data)
    except ValidationError as exc:
        return ReplyProblem("envelope", _envelope_message(exc), repairs)
    found = toolset.find(step.tool_name)
    if found is None:
        return ReplyProblem("tool", f"/tool_name: unknown tool {_short(step.tool_name)}; "
                            f"expected one of: {', '.join(toolset.names)}", repairs)
    if found.name != step.tool_name:
        repairs.append("tool_name_case")
        step = step.model_copy(update={"tool_name": found.name})
    errors = found.spec.validate_args(step.args_list)
    if errors:
        shown = "; ".join(f"/args_list{e.path}: {e.message}" for e in errors[:4])
        more = f" (+{len(errors) - 4} more)" if len(errors) > 4 else ""
        return ReplyProblem("args", f"bad arguments for {found.name}: {shown}{more}", repairs)
    return Parsed(step, repairs)


def response_schema(toolset: Toolset, thought_max: int | None = None) -> dict[str, Any]:
    """One alternative per tool: tool_name a const, args_list that tool's own schema."""
    thought: dict[str, Any] = {"type": "string"}
    if thought_max:
        thought["maxLength"] = thought_max
    return {
        "type": "object",
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "thought": thought,
                    "tool_name": {"const": t.name},
                    "args_list": t.spec.parameters,
                },
                "required": list(ENVELOPE_KEYS),
                "additionalProperties": False,
            }
            for t in toolset
        ],
    }


def response_format(mode: str, toolset: Toolset, thought_max: int | None = None) -> dict | None:
    if mode == "schema":
        return {"type": "json_schema",
                "json_schema": {"name": "agent_step", "strict": False,
                                "schema": response_schema(toolset, thought_max)}}
    if mode == "object":
        return {"type": "json_object"}
    return None


_FENCE = re.compile(r"```[A-Za-z0-9_-]*\s*\n?(.*?)(?:```|$)", re.S)
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S | re.I)


def _load(text: str, repairs: list[str]) -> Any:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        data = _repair(text or "", repairs)
        if isinstance(data, ReplyProblem):
            return data
    if isinstance(data, list) and len(data) >= 1 and isinstance(data[0], dict):
        if len(data) > 1:
            repairs.append("kept_first_of_many")
        repairs.append("unwrapped_list")
        data = data[0]
    if not isinstance(data, dict):
        return ReplyProblem("json", f"/: expected a JSON object, got {json_type(data)} "
                            f"{_short(data)}", repairs)
    return data


def _repair(text: str, repairs: list[str]) -> Any:
    body = text
    if _THINK.search(body):
        body = _THINK.sub("", body)
        repairs.append("stripped_think")
    fence = _FENCE.search(body)
    if fence and "{" in fence.group(1):
        body = fence.group(1)
        repairs.append("stripped_code_fence")
    start = body.find("{")
    if start < 0:
        shown = text.strip()
        got = f"text {_short(shown)}" if shown else "an empty reply"
        return ReplyProblem("json", f"expected a JSON object, got {got}")
    obj, closed = _first_object(body, start)
    if body[:start].strip() or body[start + len(obj):].strip():
        repairs.append("extracted_object")
    try:
        return json.loads(obj)
    except json.JSONDecodeError as exc:
        first_error = exc
    import json_repair

    try:
        data = json_repair.loads(obj)
    except Exception:
        data = None
    if not isinstance(data, dict) or not data:
        return ReplyProblem("json", f"invalid JSON at line {first_error.lineno} column "
                            f"{first_error.colno}: {first_error.msg}", repairs)
    repairs.append("json_repair" if closed else "closed_truncated_json")
    return data


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


def _fix_keys(data: dict[str, Any], repairs: list[str]) -> dict[str, Any]:
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
    if "tool_name" in data and data.get("args_list", None) is None:
        data["args_list"] = {}
        repairs.append("empty_args_list")
    if "tool_name" in data and "thought" not in data:
        data["thought"] = ""
        repairs.append("missing_thought")
    extra = [k for k in data if k not in ENVELOPE_KEYS]
    if extra and "tool_name" in data:
        for k in extra:
            data.pop(k)
        repairs.append("dropped_keys:" + ",".join(extra))
    return data


def _envelope_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = _pointer(err["loc"]) or "/"
        if err["type"] == "missing":
            parts.append(f"{where}: required key is missing")
        elif err["type"] == "extra_forbidden":
            parts.append(f"{where}: unexpected key")
        else:
            want = {"string_type": "string", "dict_type": "object"}.get(err["type"], err["msg"])
            parts.append(f"{where}: expected {want}, got {json_type(err['input'])} "
                         f"{_short(err['input'])}")
    return "; ".join(parts)
