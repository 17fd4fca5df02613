"""The piece of a step around its tool: calling the tool, in the run's context, where a
failure becomes what the model reads next instead of our crash."""

from __future__ import annotations

from typing import Any

from . import events as ev
from .errors import ToolError, UserError
from .hooks import ToolCall
from .state import Pending, RunState
from .tools.core import CODE_TOOL
from .tools.tool import RunContext
from .tools.toolset import Toolset


class Calling:
    def __init__(self, toolset: Toolset, ctx: RunContext):
        self.toolset, self.ctx = toolset, ctx

    def invoke(self, state: RunState, call: ToolCall) -> tuple[Any, bool]:
        """The tool's result (or a Pending) and whether it failed."""
        tool = self.toolset.get(call.tool)
        if tool is None:
            return {"error": f"unknown tool {call.tool!r}"}, True
        ctx = self.ctx
        ctx.step = len(state.steps)
        if call.tool == CODE_TOOL:
            state.code_used = True
        try:
            wait = ctx.cancel.call_here if tool.stops_on_cancel else ctx.cancel.call
            out = wait(tool.invoke, call.args, ctx)
        except UserError:  # a developer's mistake (say, a refused sandbox) ends the run
            raise
        except ToolError as exc:
            return {"error": str(exc)}, True
        except (Exception, SystemExit) as exc:  # a tool's bug is an observation, not our crash
            return {"error": f"{type(exc).__name__}: {exc}"}, True
        return (out if isinstance(out, Pending) else ev.jsonable(out)), False
