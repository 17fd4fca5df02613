"""The step protocol: raw model text in, a validated Step or a precise problem out.

Stages, in order: strict JSON, a text dialect (ReAct or PAUSE, see `dialects`) or local
repair, envelope validation, tool lookup, argument validation. Every repair is named and
counted; every problem is phrased for the model to read on the re-ask.

This module runs the stages and builds the response schema; the values it returns live in
`reply` (Step, Parsed, ReplyProblem) and the JSON repairs in `repair`.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from pydantic import ValidationError

from . import dialects
from .repair import KEY_ALIASES  # noqa: F401  re-exported: it lived here
from .repair import (CLOSED, GUESSES, NOT_JSON, THINK, closes, ends_the_text, fix_keys,
                     load_object)
from .notes import note
from .reply import ENVELOPE_KEYS, CallEnvelope, ParallelStep, Parsed, ReplyProblem, Step
from .state import CallRecord
from .tools.schema import got, json_pointer, short_json
from .tools.toolset import Toolset


def parse_reply(text: str, toolset: Toolset, cut: bool = False,
                most: int = 1, unended: bool = False) -> Parsed | ReplyProblem:
    """`cut`: the reply reached its token cap; it is read only if its JSON is whole as
    written. `unended`: its end is not the model's (models.ModelReply); never read. Nor is
    a reply whose JSON the repair had to close: the repair fixes a finished reply's syntax,
    and never completes one that was cut, whose call would run with half its arguments.
    `most`: the calls a step may make; from 2 on, the envelope holds a list of them
    (`ParallelStep`), and a reply in the one-call envelope is one call."""
    repairs: list[str] = []
    try:
        strict = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        strict = NOT_JSON
    reading, told = (None if strict is not NOT_JSON else _read_dialect(text)), None
    if reading is not None:
        data, told = _from_dialect(reading, toolset, repairs), _dialect_note(reading)
    else:
        data = load_object(text, repairs, strict)
    if unended or CLOSED in repairs or cut and not _whole(text, data, strict, repairs, reading):
        return ReplyProblem("cut", note("reply_cut" if cut else "reply_unended"), repairs)
    if isinstance(data, ReplyProblem):
        return data
    if reading is None:
        data = fix_keys(data, repairs)
        if most > 1 and "calls" in data:
            return _several(data, toolset, most, repairs, strict, text)
    try:
        step = Step.model_validate(data)
    except ValidationError as exc:
        return ReplyProblem("envelope", _envelope_message(exc), repairs)
    found = toolset.find(step.tool_name)
    if found is None:
        return ReplyProblem("tool", f"/tool_name: unknown tool {short_json(step.tool_name)}; "
                            f"expected one of: {', '.join(toolset.names)}", repairs)
    if found.name != step.tool_name:
        repairs.append("tool_name_case")
        step = step.model_copy(update={"tool_name": found.name})
    problem = _checked(found, step.args_list, repairs)
    if problem is not None:
        return problem
    as_written = reading is None and not repairs and strict == {
        "thought": step.thought, "tool_name": step.tool_name, "args_list": step.args_list}
    return Parsed(step.thought, [CallRecord(tool=step.tool_name, args=step.args_list)],
                  repairs, told, raw=text if as_written else None)


def _checked(found: Any, args: dict[str, Any], repairs: list[str],
             where: str = "") -> ReplyProblem | None:
    """A call's arguments against its tool's schema."""
    errors = found.spec.validate_args(args)
    if errors:
        shown = "; ".join(f"{where}/args_list{e.path}: {e.message}" for e in errors[:4])
        more = f" (+{len(errors) - 4} more)" if len(errors) > 4 else ""
        return ReplyProblem("args", f"bad arguments for {found.name}: {shown}{more}", repairs)
    return None


def _several(data: dict[str, Any], toolset: Toolset, most: int,
             repairs: list[str], strict: Any, text: str) -> Parsed | ReplyProblem:
    """A step of 1 to `most` calls, each checked as a one-call step's is; the final tool
    only alone. A problem names the call it is in (`/calls/1/...`)."""
    if "thought" not in data:
        data = {**data, "thought": ""}
        repairs.append("missing_thought")
    try:
        plan = ParallelStep.model_validate(data)
    except ValidationError as exc:
        return ReplyProblem("envelope", _envelope_message(exc), repairs)
    if not plan.calls or len(plan.calls) > most:
        told = note("calls_too_many", n=len(plan.calls), most=most) if plan.calls \
            else note("calls_none", most=most)
        return ReplyProblem("calls", told, repairs)
    calls = []
    for n, item in enumerate(plan.calls):
        where, own = f"/calls/{n}", []
        item = fix_keys({"thought": "", **item}, own)
        item.pop("thought", None)
        repairs += [f"{where}:{r}" for r in own]
        try:
            call = CallEnvelope.model_validate(item)
        except ValidationError as exc:
            return ReplyProblem("envelope", _envelope_message(exc, where), repairs)
        found = toolset.find(call.tool_name)
        if found is None:
            return ReplyProblem("tool", f"{where}/tool_name: unknown tool "
                                f"{short_json(call.tool_name)}; expected one of: "
                                f"{', '.join(toolset.names)}", repairs)
        if found.name != call.tool_name:
            repairs.append(f"{where}:tool_name_case")
            call = CallEnvelope.model_construct(tool_name=found.name,
                                                args_list=call.args_list)
        problem = _checked(found, call.args_list, repairs, where)
        if problem is not None:
            return problem
        calls.append(CallRecord(tool=call.tool_name, args=call.args_list))
    final = toolset.final.name
    if len(calls) > 1 and any(c.tool == final for c in calls):
        others = len(calls) - 1
        return ReplyProblem("calls", note("calls_final_alone", final=final, others=others,
                                          s="" if others == 1 else "s"), repairs)
    as_written = not repairs and strict == {"thought": plan.thought, "calls": [
        {"tool_name": c.tool, "args_list": c.args} for c in calls]}
    return Parsed(plan.thought, calls, repairs, raw=text if as_written else None)


def _read_dialect(text: str) -> dialects.Reading | None:
    """A reply that is not JSON, read as a text dialect; None for text that only wraps JSON."""
    reading = dialects.read(THINK.sub("", text or ""))
    act = reading.action if reading else None
    if act is not None and not act.final and "{" in act.name:
        return None  # `Action:` over a whole JSON step: the JSON path reads it
    if reading is not None and act is None and "{" in text:
        return None
    return reading


def _whole(text: str, data: Any, strict: Any, repairs: list[str],
           reading: dialects.Reading | None) -> bool:
    """Whether a reply cut at its cap is whole: its JSON strict as written, or repaired
    without a guess at where its object ends and ending the text. A first call whole in a
    cut list, or in prose that goes on, is no whole reply: what followed it was cut."""
    if reading is not None:
        return _whole_action(reading)
    if isinstance(data, ReplyProblem):
        return False
    return strict is not NOT_JSON or not GUESSES.intersection(repairs) and ends_the_text(text)


def _whole_action(reading: dialects.Reading) -> bool:
    """Whether a text reply cut at its cap is whole: only an action whose input is a JSON
    object as written shows where it ends; a bare input or a final answer may stop anywhere,
    and actions after it mean the reply went on past it."""
    act = reading.action
    if act is None or act.final or reading.ignored:
        return False
    try:
        return isinstance(json.loads(act.input or ""), dict)
    except (ValueError, RecursionError):
        return False


def _from_dialect(reading: dialects.Reading, toolset: Toolset,
                  repairs: list[str]) -> dict[str, Any] | ReplyProblem:
    repairs += reading.repairs
    act = reading.action
    if act is None:
        return ReplyProblem("envelope", f"line {reading.thought_line}: a Thought, but no "
                            "'Action:' line and no 'Final Answer:' line; if the thought holds "
                            "your answer, write it on a line 'Final Answer: ...'", repairs)
    if not reading.thought:
        repairs.append("missing_thought")
    answer = "Answer" if reading.dialect == "pause" else "Final Answer"
    named = toolset.find(act.name) if act.name else None
    if (named is not None and named.final and act.input is None and reading.ignored
            and reading.ignored[0].final):
        # `Action: TaskCompleteTool` and then `Final Answer: X`: one answer, written both ways
        act = reading.action = reading.ignored.pop(0)
        repairs.append("final_answer_after_final_action")
        if not reading.ignored:
            repairs.remove("ignored_extra_actions")
    if act.final:
        if not (act.input or "").strip():
            return ReplyProblem("args", f"line {act.line}: '{answer}:' is empty; write the "
                                f"answer after it, on the same line", repairs)
        found = toolset.final
    elif not act.name:
        return ReplyProblem("envelope", f"line {act.line}: 'Action Input:' without an 'Action: "
                            "NAME' line before it naming the tool", repairs)
    else:
        found = toolset.find(act.name) or _named_in(act.name, toolset, repairs)
    if found is None:
        return ReplyProblem("tool", f"line {act.line}: unknown tool {short_json(act.name)} in "
                            f"'Action:'; expected one of: {', '.join(toolset.names)}", repairs)
    args = _dialect_args(act, found, reading.dialect, repairs)
    if isinstance(args, ReplyProblem):
        return args
    named = act.name if toolset.find(act.name) else found.name
    return {"thought": reading.thought, "tool_name": named, "args_list": args}


def _named_in(text: str, toolset: Toolset, repairs: list[str]) -> Any:
    """`Action: Call GetTimeTools` or `use the GetTimeTools tool`: one tool's name among words."""
    hits = {t.name for word in re.findall(r"[\w.\-]+", text) if (t := toolset.find(word))}
    if len(hits) != 1:
        return None
    repairs.append("tool_name_in_text")
    return toolset.get(hits.pop())


def _dialect_args(act: dialects.Action, tool: Any, dialect: str,
                  repairs: list[str]) -> dict[str, Any] | ReplyProblem:
    """The arguments an action's input stands for: a JSON object or a Python dict as it is;
    anything else fills the one parameter it can only be."""
    props = tool.spec.parameters.get("properties", {})
    required = tool.spec.parameters.get("required", [])
    raw = (act.input or "").strip()
    if not raw:
        if not required:
            return {}
        where = ("on an 'Action Input:' line after it, as a JSON object" if dialect == "react"
                 else f"after the tool name, as in 'Action: {tool.name}: INPUT'")
        return ReplyProblem("args", f"line {act.line}: no input for {tool.name}, which requires "
                            f"{', '.join(required)}; write it {where}", repairs)
    if act.final and props.get("output", {}).get("type") == "string":
        return {"output": raw}
    value, kind = _literal(raw)
    if isinstance(value, dict):
        if kind != "json":
            repairs.append(kind)
        return value
    slot = required[0] if len(required) == 1 else next(iter(props)) if len(props) == 1 else None
    if slot is None:
        example = json.dumps({p: "..." for p in (required or list(props))[:3]})
        return ReplyProblem("args", f"line {act.line}: the input {short_json(raw, 40)} is not a JSON "
                            f"object, and {tool.name} takes "
                            f"{len(props)} parameters ({', '.join(props) or 'none'}), so it cannot "
                            f"stand for one of them; write a JSON object such as {example}", repairs)
    repairs.append("bare_input")
    if props.get(slot, {}).get("type") == "string" and not isinstance(value, str):
        return {slot: raw}
    return {slot: raw if value is None else value}


def _literal(text: str) -> tuple[Any, str | None]:
    """(value, how it was read): JSON, a Python literal, or repaired JSON; (None, None) else."""
    try:
        return json.loads(text), "json"
    except (ValueError, RecursionError):
        pass
    if text[:1] in "{[('\"" and len(text) < 20_000:
        try:
            value = ast.literal_eval(text)
            json.dumps(value)  # a set or bytes is no argument
            return value, "python_literal_input"
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    if text.startswith("{"):
        import json_repair

        try:
            value = json_repair.loads(text)
        except Exception:  # the repairer has its own failure modes
            value = None
        if isinstance(value, dict) and value:
            return value, "json_repair" if closes(text) else CLOSED
    return None, None


def _dialect_note(reading: dialects.Reading) -> str | None:
    notes = []
    if reading.ignored:
        names = ", ".join("Final Answer" if a.final else a.name or "?" for a in reading.ignored)
        notes.append(f"Your reply had {len(reading.ignored) + 1} actions: only the first was run, "
                     f"and the rest ({names}) were ignored. Write one action per reply.")
    if reading.dropped_observation is not None:
        notes.append(f"Your reply went on with an Observation of its own (line "
                     f"{reading.dropped_observation}); it was dropped. Observations come only "
                     "from the tools: stop after the action and wait for this one.")
    return " ".join(notes) or None


def response_schema(toolset: Toolset, thought_max: int | None = None,
                    without: str | None = None, most: int = 1) -> dict[str, Any]:
    """One alternative per tool: tool_name a const, args_list that tool's own schema.
    `without` leaves one tool out (never the final one): a step that must not call it.
    `most` from 2 on: a list of 1 to `most` such calls, or the final tool's call alone."""
    if most > 1:
        return _several_schema(toolset, thought_max, without, most)
    thought: dict[str, Any] = {"type": "string"}
    if thought_max:
        thought["maxLength"] = thought_max
    alternatives, defs = [], {}
    for t in toolset:
        if t.name == without and not t.final:
            continue
        args, own_defs = _hoist_defs(t.spec.parameters, prefix=f"{t.name}.")
        defs.update(own_defs)
        alternatives.append({
            "type": "object",
            "properties": {"thought": thought, "tool_name": {"const": t.name}, "args_list": args},
            "required": list(ENVELOPE_KEYS),
            "additionalProperties": False,
        })
    schema: dict[str, Any] = {"type": "object", "anyOf": alternatives}
    if defs:
        schema["$defs"] = defs
    return schema


def _several_schema(toolset: Toolset, thought_max: int | None, without: str | None,
                    most: int) -> dict[str, Any]:
    one = response_schema(toolset, thought_max, without)
    calls, final = [], None
    for alternative in one["anyOf"]:
        props = alternative["properties"]
        call = {"type": "object",
                "properties": {"tool_name": props["tool_name"], "args_list": props["args_list"]},
                "required": ["tool_name", "args_list"], "additionalProperties": False}
        if props["tool_name"]["const"] == toolset.final.name:
            final = call
        else:
            calls.append(call)
    thought = one["anyOf"][0]["properties"]["thought"]

    def step(items: list[dict[str, Any]], n: int) -> dict[str, Any]:
        return {"type": "object", "properties": {"thought": thought, "calls": {
            "type": "array", "items": {"anyOf": items} if len(items) > 1 else items[0],
            "minItems": 1, "maxItems": n}},
                "required": ["thought", "calls"], "additionalProperties": False}

    schema: dict[str, Any] = {"type": "object", "anyOf": [
        *([step(calls, most)] if calls else []), step([final], 1)]}
    if "$defs" in one:
        schema["$defs"] = one["$defs"]
    return schema


def _hoist_defs(schema: dict[str, Any], prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A recursive tool schema keeps $defs at its root; nested under args_list its $refs would
    dangle, so its definitions move to the response schema's root under prefixed names."""
    if "$defs" not in schema:
        return schema, {}

    def rename(node: Any) -> Any:
        if isinstance(node, list):
            return [rename(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: rename(v) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = "#/$defs/" + prefix + ref[len("#/$defs/"):]
        return out

    body = rename({k: v for k, v in schema.items() if k != "$defs"})
    return body, {prefix + name: rename(d) for name, d in schema["$defs"].items()}


def response_format(mode: str, toolset: Toolset, thought_max: int | None = None,
                    without: str | None = None, most: int = 1) -> dict | None:
    if mode == "schema":
        return {"type": "json_schema",
                "json_schema": {"name": "agent_step", "strict": False,
                                "schema": response_schema(toolset, thought_max, without,
                                                          most)}}
    if mode == "object":
        return {"type": "json_object"}
    return None


def _envelope_message(exc: ValidationError, within: str = "") -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = within + json_pointer(err["loc"]) or "/"
        if err["type"] == "missing":
            parts.append(f"{where}: required key is missing")
        elif err["type"] == "extra_forbidden":
            parts.append(f"{where}: unexpected key")
        else:
            want = {"string_type": "string", "dict_type": "object"}.get(err["type"], err["msg"])
            parts.append(f"{where}: expected {want}, got {got(err['input'])}")
    return "; ".join(parts)
