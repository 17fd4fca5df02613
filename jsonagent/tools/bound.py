"""The run's tool results as variables of the code interpreter.

Small models write `order_total['total'] * order_total['usd_per_unit']` after calling
`order_total`, as if its result were a variable; or they copy a result into a string
literal, where one quote breaks the cell. In the round-8 tasks the 1.5B model did one or
the other in 3 of its 17 misses (issue 37). So a cell that names a tool of the run gets that
tool's latest result under its name, as Python data.

The interpreter's own results and the person's answers are not bound: the person answers
several questions, and the last answer under the tool's name would pass for all of them.
A name the code gave a value of its own is left alone: it is bound only while it is unset or
still holds what an earlier binding put there. Names of builtins are never bound, so a tool
called `sum` does not hide `sum()`.
"""

from __future__ import annotations

import builtins
import io
import json
import keyword
import re
import tokenize
from typing import Any, Container

from ..notes import note

_UNDEFINED = re.compile(r"NameError: name '(\w+)' is not defined")
HELD = "_tool_results"
"""The kernel's record of what it was given, so that a later binding knows its own."""


def results_named(code: str, run: Any, skip: Container[str]) -> dict[str, Any]:
    """The latest result of each tool of `run` (a RunState) that `code` names, of the calls
    that succeeded, but those of the tools in `skip`; JSON data only."""
    names = _names(code)
    return {name: value for name, value in latest(run, skip).items() if name in names}


def latest(run: Any, skip: Container[str]) -> dict[str, Any]:
    """The latest result of each tool of `run` that may be bound, by the tool's name."""
    found: dict[str, Any] = {}
    for record in reversed(getattr(run, "steps", None) or ()):
        for call in reversed(record.calls):
            name = call.tool
            if name not in found and call.done and not call.error and name not in skip \
                    and _bindable(name):
                try:
                    json.dumps(call.observation)
                except (TypeError, ValueError):
                    continue
                found[name] = call.observation
    return found


def unknown_name(error: str | None, run: Any, skip: Container[str]) -> str | None:
    """For a cell that failed on a name it never defined, when the run has results: a note
    that names the variables that hold them (the model guessed `lines` for `invoice_lines`)."""
    found = _UNDEFINED.search(error or "")
    names = sorted(latest(run, skip)) if found else []
    return note("code_unknown_name", missing=found.group(1), names=", ".join(names)) \
        if names and found.group(1) not in names else None


def binding(values: dict[str, Any]) -> str:
    """A cell that binds `values` in the kernel, printing nothing."""
    return (f"import json as _j\n"
            f"_held = globals().setdefault({HELD!r}, {{}})\n"
            f"for _n, _v in _j.loads({json.dumps(values)!r}).items():\n"
            f"    if _n not in globals() or globals()[_n] is _held.get(_n):\n"
            f"        globals()[_n] = _held[_n] = _v\n"
            f"del _j, _held, _n, _v\n")


def _names(code: str) -> set[str]:
    names = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.NAME:
                names.add(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # the names up to where it broke: the cell fails on its own anyway
    return names


def _bindable(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and not hasattr(builtins, name)
