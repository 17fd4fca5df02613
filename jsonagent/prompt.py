"""The system prompt, rendered from the toolset once per run so it stays byte-identical."""

from __future__ import annotations

import json
from importlib.resources import files
from string import Template

from .builtins import ASK_HUMAN_TOOL
from .toolset import Toolset


def system_prompt(toolset: Toolset, template: str | None = None) -> str:
    text = template or files("jsonagent").joinpath("prompts/system.md").read_text("utf-8")
    rules = []
    if ASK_HUMAN_TOOL in toolset:
        rules.append(f"If you need information or a decision that only the user has, "
                     f"call {ASK_HUMAN_TOOL}.")
    rules.append(f"When you have the final answer, call {toolset.final.name}. "
                 "It is the only way to finish.")
    more = "\n".join(f"{i}. {r}" for i, r in enumerate(rules, start=4))
    tools = "\n".join(json.dumps(t.spec.describe(), ensure_ascii=False) for t in toolset)
    return Template(text).safe_substitute(more_rules=more, tools=tools).strip()
