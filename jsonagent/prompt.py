"""What the model reads: the system prompt and the history, rendered in one prompt style.

The stored history is style-neutral (JSON steps and observations, see `state.Message`); a
style turns it into the messages of one request. The system prompt is rendered once per run,
so it stays byte-identical and the model's prefix cache stays warm.
"""

from __future__ import annotations

import hashlib
import json
from string import Template

from .envelope import response_format
from .models import Message as WireMessage
from .notes import template
from .reply import ReplyProblem, envelope_text
from .state import Message
from .tools.core import ASK_HUMAN_TOOL, FINAL_TOOL
from .tools.toolset import Toolset


class JsonStyle:
    """Every reply is one JSON object; observations go back as JSON. With `most` of 2 or
    more, a reply holds a list of 1 to `most` calls (`AgentConfig.parallel_calls`)."""

    name = "json"
    stop: list[str] | None = None
    """Stop sequences to send with each request."""

    def __init__(self, most: int = 1):
        self.most = most

    def system(self, toolset: Toolset) -> str:
        tools = "\n".join(t.spec.shown for t in toolset)
        envelope = envelope_text("several" if self.most > 1 else "one")
        rule = Template(envelope["rule"]).safe_substitute(most=self.most,
                                                          final=toolset.final.name)
        return Template(template("system.md")).safe_substitute(
            reply=envelope["reply"], rule=rule, more_rules=_more_rules(toolset),
            tools=tools).strip()

    def render(self, messages: list[Message], observation_role: str = "user", *,
               tool_calls: bool = False) -> list[WireMessage]:
        """With `tool_calls`, each step and its result go in the native tool-call form, so
        the endpoint's chat template puts results where the model was trained to read them
        (Qwen's <tool_response>, for one)."""
        if tool_calls:
            return _tool_call_form(messages, observation_role)
        return [_plain(m, observation_role) for m in messages]

    def response_format(self, mode: str, toolset: Toolset, thought_max: int | None = None,
                        without: str | None = None) -> dict | None:
        return response_format(mode, toolset, thought_max, without, self.most)

    def reask(self, problem: ReplyProblem, toolset: Toolset) -> str:
        return problem.for_model(toolset, self.most)


class ReactStyle:
    """The classic ReAct text protocol: Thought / Action / Action Input, then Observation.

    For models fine-tuned on it. Replies are free text (no response_format), generation stops
    before a made-up `Observation:`, and the stored JSON steps are shown back as that text.
    """

    name = "react"
    stop: list[str] | None = ["Observation:"]
    """Stop sequences to send with each request."""
    most = 1
    """An action a reply: the text protocol has no list of calls."""

    def system(self, toolset: Toolset) -> str:
        final = toolset.final
        actions = [t for t in toolset if not t.final]
        tools = "\n".join(f"{t.name}: {t.spec.description} Parameters: "
                          + json.dumps(t.spec.parameters, ensure_ascii=False) for t in actions)
        shape = "" if _plain_answer(final) else (
            ", as one JSON object with these parameters: "
            + json.dumps(final.spec.parameters, ensure_ascii=False))
        return Template(template("react.md")).safe_substitute(
            tools=tools, tool_names=", ".join(t.name for t in actions), answer_shape=shape,
            more_rules=_more_rules(toolset, final_rule=False)).strip()

    def render(self, messages: list[Message], observation_role: str = "user", *,
               tool_calls: bool = False) -> list[WireMessage]:
        """`tool_calls` is ignored: this style's steps and observations are text."""
        out: list[WireMessage] = []
        for m in messages:
            content = m.content
            if m.role == "assistant":
                content = _react_step(m.content)
            elif m.role == "observation":
                content = _react_observation(m.content)
            out.append({"role": observation_role if m.role == "observation" else m.role,
                        "content": content})
        return out

    def response_format(self, mode: str, toolset: Toolset, thought_max: int | None = None,
                        without: str | None = None) -> dict | None:
        return None  # a grammar or a JSON mode would forbid the very text this style asks for

    def reask(self, problem: ReplyProblem, toolset: Toolset) -> str:
        names = ", ".join(t.name for t in toolset if not t.final)
        return Template(template("react_reask.md")).safe_substitute(
            problem=problem.message, tool_names=names).strip()


def _tool_call_form(messages: list[Message], observation_role: str) -> list[WireMessage]:
    """A step followed by its results becomes an assistant message with `tool_calls` (one a
    call of the step) and a `tool` message answering each. The step's JSON stays as the
    content: it holds the thought, which the calls alone would lose, and it shows the model
    the form it is asked to write. Anything else (a re-asked raw reply, a result whose step
    was summarised away) keeps the plain form."""
    out: list[WireMessage] = []
    seen: dict[str, int] = {}
    answering: list[dict] = []  # the calls of the step just shown, each to be answered
    for i, m in enumerate(messages):
        if m.role == "observation" and answering:
            out.append({"role": "tool", "tool_call_id": answering.pop(0)["id"],
                        "content": m.content})
            continue
        answering = []
        answered = i + 1 < len(messages) and messages[i + 1].role == "observation"
        calls = _calls(m.content) if m.role == "assistant" and answered else None
        if calls is None:
            out.append(_plain(m, observation_role))
            continue
        # the id comes from the step itself, so every request shows the same one (and the
        # endpoint's prompt cache keeps the prefix); a repeated step gets its count added
        digest = hashlib.sha1(m.content.encode()).hexdigest()[:12]
        seen[digest] = seen.get(digest, 0) + 1
        call_id = f"call_{digest}" + (f"_{seen[digest]}" if seen[digest] > 1 else "")
        answering = [{"id": call_id if len(calls) == 1 else f"{call_id}-{n}",  # [A-Za-z0-9_-]
                      "type": "function", "function": call} for n, call in enumerate(calls)]
        out.append({"role": "assistant", "content": m.content, "tool_calls": list(answering)})
    return out


def _plain(m: Message, observation_role: str) -> WireMessage:
    return {"role": observation_role if m.role == "observation" else m.role, "content": m.content}


def _calls(content: str) -> list[dict] | None:
    """The calls of a stored step, in the form of a `tool_calls` entry's function."""
    try:
        step = json.loads(content)
        calls = step["calls"] if "calls" in step else [step]
        named = [(c["tool_name"], c["args_list"]) for c in calls]
    except (ValueError, TypeError, KeyError):
        return None
    if not named or not all(isinstance(name, str) for name, _ in named):
        return None
    return [{"name": name, "arguments": json.dumps(args, ensure_ascii=False)}
            for name, args in named]


def _more_rules(toolset: Toolset, final_rule: bool = True) -> str:
    rules = []
    if ASK_HUMAN_TOOL in toolset:
        rules.append(f"For facts or decisions only the user has, call {ASK_HUMAN_TOOL}.")
    if final_rule:
        rules.append(f"Once you have the final answer, call {toolset.final.name}: "
                     "the only way to finish.")
    return "\n".join(f"{i}. {r}" for i, r in enumerate(rules, start=3 if not final_rule else 4))


def _plain_answer(final) -> bool:
    props = final.spec.parameters.get("properties", {})
    return list(props) == ["output"] and props["output"].get("type") == "string"


def _react_step(content: str) -> str:
    """A stored step as the text the model would have written; a raw reply stays as it was."""
    try:
        step = json.loads(content)
        thought, tool, args = step["thought"], step["tool_name"], step["args_list"]
    except (ValueError, TypeError, KeyError):
        return content
    lines = [f"Thought: {thought}"] if thought else []
    if tool == FINAL_TOOL and list(args) == ["output"] and isinstance(args["output"], str):
        return "\n".join(lines + [f"Final Answer: {args['output']}"])
    return "\n".join(lines + [f"Action: {tool}",
                              f"Action Input: {json.dumps(args, ensure_ascii=False)}"])


def _react_observation(content: str) -> str:
    try:
        data = json.loads(content)
        response, note = data["response"], data.get("note")
    except (ValueError, TypeError, KeyError):
        return f"Observation: {content}"
    text = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
    return f"Observation: {text}" + (f"\nNote: {note}" if note else "")


PromptStyle = JsonStyle | ReactStyle
STYLES: dict[str, PromptStyle] = {"json": JsonStyle(), "react": ReactStyle()}


def prompt_style(name: str = "json", most: int = 1) -> PromptStyle:
    """The style `name`; `most` calls a reply, from 2 on (the JSON style only)."""
    if most > 1:
        if name != "json":
            from .errors import ConfigError

            raise ConfigError(f"parallel_calls={most} needs the json prompt style: the "
                              f"{name} style writes one action a reply")
        return JsonStyle(most)
    return STYLES[name]


def system_prompt(toolset: Toolset, style: str = "json") -> str:
    return prompt_style(style).system(toolset)
