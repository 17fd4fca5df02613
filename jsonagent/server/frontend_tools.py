"""Tools a client declares for one run (AG-UI's `RunAgentInput.tools`): the model sees them
beside the agent's own, and calling one pauses the run until the client sends its result.

Nothing new reaches the loop: such a tool returns a question pending, in the one pending
shape, naming the tool and its arguments; the client's result is the answer, which the loop
already makes the step's observation. The specs are recorded with the run (its config), so
whichever node drives it next builds the same tools again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, SpecError
from ..state import Pending
from ..tools.schema import FRONTEND
from ..tools.specs import ToolSpec
from ..tools.tool import Tool
from ..tools.toolset import Toolset, fold

MAX_TOOLS = 64
"""Tools one client may declare for a run."""

if TYPE_CHECKING:
    from ..deps import RunDeps

KEY = "client_tools"
"""Where a run's config records the client's tool specs."""


def frontend_tool(spec: ToolSpec) -> Tool:
    name = spec.name

    def call(**args: Any) -> Pending:  # the arguments were checked against the spec already
        return Pending(kind="question", tool=name, args=args,
                       question=f"the result of {name} (a tool the client runs)")

    return Tool(spec=spec, fn=call)


def specs(tools: list[dict[str, Any]]) -> list[ToolSpec]:
    """The client's declarations as tool specs; a bad one is the client's error. Each schema
    is checked within FRONTEND's bounds here, before anything shows, compiles or validates
    with it, and what they show the model together is held to FRONTEND's size: 64 tools each
    just within it would put 4 MB into every step's prompt."""
    if len(tools) > MAX_TOOLS:
        raise ConfigError(f"tools: {len(tools)} tools; at most {MAX_TOOLS}")
    out: list[ToolSpec] = []
    shown = 0
    for i, tool in enumerate(tools):
        data = {"name": tool.get("name"), "description": tool.get("description") or "",
                "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        try:
            spec = ToolSpec.from_dict(data, origin=f"tools[{i}]", bounds=FRONTEND)
        except SpecError as exc:  # it names tools[i] already, and says where and what
            raise ConfigError(str(exc)) from None
        except Exception as exc:
            raise ConfigError(f"tools[{i}]: {exc}") from None
        same = [j for j, s in enumerate(out) if fold(s.name) == fold(spec.name)]
        if same:
            raise ConfigError(f"tools[{i}]: {spec.name} is the name of tools[{same[0]}] "
                              "already (names are told apart without case, '_' or '-')")
        out.append(spec)
        shown += len(spec.shown)
        if shown > FRONTEND.size:
            raise ConfigError(f"tools: {shown >> 10} KB of tool specs shown to the model by "
                              f"tools[0] to tools[{i}]; at most {FRONTEND.size >> 10} KB in all")
    return out


def with_frontend_tools(deps: RunDeps, tools: list[dict[str, Any]] | None) -> RunDeps:
    """`deps` with the client's tools added; as they are, without any."""
    if not tools:
        return deps
    added = specs(tools)
    # the model's call finds a tool by its folded name: a client's `taskcompletetool` would
    # be found as the agent's TaskCompleteTool, never as itself
    agents = {fold(name) for name in deps.toolset.names}
    taken = [s.name for s in added if fold(s.name) in agents]
    if taken:
        raise ConfigError(f"tools: {', '.join(taken)} is a tool of the agent already")
    toolset = Toolset([*deps.toolset, *(frontend_tool(s) for s in added)])
    return replace(deps, toolset=toolset, system_prompt=deps.style.system(toolset))


def is_frontend(pending: Pending | None) -> bool:
    """The pending is a frontend tool's call, waiting for the client's result."""
    return pending is not None and pending.kind == "question" and pending.tool is not None
