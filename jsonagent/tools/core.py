"""The four built-in tools named in core_function.json."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..calls import IDEMPOTENT
from ..errors import ToolError
from ..notes import note
from ..state import Pending
from . import zones
from .bound import binding, failure_notes, results_named
from .cell import assigned_last, missing_module, prepare
from .tool import RunContext


def get_time(timezone: str | None = None, format: str | None = None) -> dict[str, Any]:
    if timezone and timezone.lower() in ("local", "localtime"):  # what small models write
        timezone = None
    if format and "%" not in format:  # 'YYYY' or 'ISO 8601' would come back as itself
        raise ToolError(f"format {format!r} has no strftime directive: write '%Y' for the year, "
                        "'%H:%M' for the time and so on, or leave format out for ISO 8601")
    if timezone:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        timezone = zones.canonical(timezone) or timezone
        try:
            now = datetime.now(ZoneInfo(timezone))
        except (ZoneInfoNotFoundError, ValueError):
            raise ToolError(zones.unknown(timezone)) from None
    else:
        now = datetime.now().astimezone()
    text = now.isoformat(timespec="seconds")
    if format:
        try:
            text = now.strftime(format)
        except ValueError as exc:
            raise ToolError(f"bad strftime format {format!r}: {exc}") from None
    return {"now": text, "timezone": timezone or now.tzname(), "weekday": now.strftime("%A")}


def ask_human(question: str, ctx: RunContext) -> str | Pending:
    """The person's answer; with nobody to answer now, a Pending that pauses the run."""
    answer = ctx.ask_human(question) if ctx.ask_human is not None else None
    return Pending(kind="question", question=question) if answer is None else str(answer)


def task_complete(**answer: Any) -> dict[str, Any]:
    return answer


def code_interpreter(code: str, ctx: RunContext) -> dict[str, Any]:
    cell = prepare(code)
    if not cell.runs:  # statements ran together where no split is safe: say how to write it
        return {"stdout": "", "exit_code": 1, "error": cell.note}
    notes = [cell.note] if cell.note else []
    sandbox = ctx.sandbox()
    bound = results_named(cell.code, ctx.run, UNBOUND)
    # a cancel kills the worker, and the next call starts afresh (a sandbox of your own,
    # from Agent(sandbox_factory=...), may have no kill: its call is then left to finish)
    with ctx.cancel.watch(getattr(sandbox, "kill", lambda: None)):
        if bound:  # what it returns is not the model's: had it failed, the cell says so
            sandbox.run(binding(bound))
        result = sandbox.run(cell.code)
    # the note first: the model reads why its code ran as it did before what it printed
    out: dict[str, Any] = {"note": None, **({"ran": cell.code} if cell.note else {}),
                           "stdout": result.stdout, "exit_code": result.exit_code}
    if result.stderr:
        out["stderr"] = result.stderr
    if result.error:
        out["error"] = result.error
        cells = [c.args.get("code") or "" for r in getattr(ctx.run, "steps", None) or ()
                 for c in r.calls if c.tool == CODE_TOOL and isinstance(c.args, dict)]
        notes += failure_notes(cell.code, result.error, ctx.run, UNBOUND, [*cells, cell.code])
        notes += filter(None, [missing_module(result.error)])
    if result.timed_out:
        out["timed_out"] = True
    if result.stdout_truncated or result.stderr_truncated:
        out["truncated"] = True
    notes += limit_notes(result, sandbox, AGENT_SETTINGS)
    silent = assigned_last(cell.code) if not (result.stdout or result.stderr or result.error) \
        else None
    if silent:  # the model then answers from its head: it never saw the value it computed
        notes.append(note("code_printed_nothing", variable=silent))
    if result.crashed:
        out["crashed"] = True
    if result.state_lost:
        notes.append("The interpreter was restarted: every variable, import and function "
                     "from earlier calls is gone. Define them again before using them.")
    if result.files_changed:
        out["files_changed"] = list(result.files_changed)
    if notes:
        out["note"] = " ".join(notes)
    else:
        del out["note"]
    return out


AGENT_SETTINGS = {"memory": "AgentConfig.sandbox_memory_mb", "time": "AgentConfig.sandbox_timeout",
                  "output": "AgentConfig.sandbox_output_bytes"}
"""What sets each of the interpreter's limits, named in the notes about them."""


def limit_notes(result: Any, sandbox: Any, settings: dict[str, str]) -> list[str]:
    """What the code ran into, for whoever reads its result: which of the interpreter's
    limits, how much it is, and what sets it (`settings`). A bare MemoryError, a timeout
    or output cut short say none of that. The model reads these, and so does a person at
    `jsonagent sandbox run`, from the same texts."""
    notes = []
    if (result.error or "").rstrip().endswith("MemoryError"):
        notes.append(note("out_of_memory", limit=getattr(sandbox, "memory_mb", "?"),
                          setting=settings["memory"]))
    if result.timed_out:
        notes.append(note("out_of_time", limit=f"{getattr(sandbox, 'timeout', 0):g}",
                          setting=settings["time"]))
    if result.stdout_truncated or result.stderr_truncated:
        notes.append(note("output_cut", limit=getattr(sandbox, "output_limit", "?"),
                          setting=settings["output"], stdout=result.stdout_bytes,
                          stderr=result.stderr_bytes))
    return notes


# Each returns at once, asks the person (on the loop's thread anyway), or is stopped by a
# cancel: the loop may call them in its own thread (see cancel.py).
for _fn in (get_time, ask_human, task_complete, code_interpreter):
    _fn.stops_on_cancel = True
    _fn.effects = IDEMPOTENT  # done again after a crash, they do nothing more

BUILTINS = {
    "GetTimeTools": get_time,
    "AskHumanHelpTool": ask_human,
    "TaskCompleteTool": task_complete,
    "CodeInterpreterTool": code_interpreter,
}
FINAL_TOOL = "TaskCompleteTool"
ASK_HUMAN_TOOL = "AskHumanHelpTool"
CODE_TOOL = "CodeInterpreterTool"
UNBOUND = (CODE_TOOL, ASK_HUMAN_TOOL)
"""Tools whose results a code cell does not read under their names (bound.py)."""
