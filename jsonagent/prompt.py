"""What the model reads: the system prompt and the history, rendered in one prompt style.

The stored history is style-neutral (JSON steps and observations, see `state.Message`); a
style turns it into the messages of one request. The system prompt is rendered once per run,
so it stays byte-identical and the model's prefix cache stays warm.
"""

from __future__ import annotations

import functools
import json
from importlib.resources import files
from string import Template

from .models import Message as WireMessage
from .state import Message
from .tools.core import ASK_HUMAN_TOOL
from .tools.toolset import Toolset


class JsonStyle:
    """Every reply is one JSON object; observations go back as JSON."""

    name = "json"
    stop: list[str] | None = None
    """Stop sequences to send with each request."""

    def system(self, toolset: Toolset) -> str:
        text = template("system.md")
        rules = []
        if ASK_HUMAN_TOOL in toolset:
            rules.append(f"If you need information or a decision that only the user has, "
                         f"call {ASK_HUMAN_TOOL}.")
        rules.append(f"When you have the final answer, call {toolset.final.name}. "
                     "It is the only way to finish.")
        more = "\n".join(f"{i}. {r}" for i, r in enumerate(rules, start=4))
        tools = "\n".join(json.dumps(t.spec.describe(), ensure_ascii=False) for t in toolset)
        return Template(text).safe_substitute(more_rules=more, tools=tools).strip()

    def render(self, messages: list[Message], observation_role: str = "user") -> list[WireMessage]:
        return [{"role": observation_role if m.role == "observation" else m.role,
                 "content": m.content} for m in messages]


@functools.lru_cache(maxsize=8)
def template(name: str) -> str:
    return files("jsonagent").joinpath("prompts", name).read_text("utf-8")


def note(name: str, **fields: object) -> str:
    """A note the loop adds for the model, from prompts/notes.json."""
    return _notes()[name].format(**fields)


@functools.lru_cache(maxsize=1)
def _notes() -> dict[str, str]:
    return json.loads(template("notes.json"))


STYLES = {"json": JsonStyle()}


def prompt_style(name: str = "json") -> JsonStyle:
    return STYLES[name]


def system_prompt(toolset: Toolset) -> str:
    return prompt_style().system(toolset)
