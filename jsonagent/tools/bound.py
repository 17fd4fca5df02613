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

A cell that fails is told what it needs about those results (`failure_notes`): where they
are and what each is, for a name it guessed or a result it copied into a literal that broke;
the shape of one it misread (`invoice_lines['lines']` on a list).
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import keyword
import re
import sys
import tokenize
from typing import Any, Container, Iterable

from ..notes import note

_UNDEFINED = re.compile(r"^NameError: name '(\w+)' is not defined", re.M)
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


def failure_notes(code: str, error: str | None, run: Any, skip: Container[str],
                  cells: Iterable[str] = ()) -> list[str]:
    """For a cell that failed, what the model needs to see about the run's results: where
    they are when it guessed a name (`lines` for `invoice_lines`) or copied one into a string
    literal that broke, and their shape when it read one as what it is not (a list indexed
    by `'lines'`). A name nothing can hold, with no results to point to, is a value the
    model meant to write in (the person's answer as `first_number`). `cells` is the run's
    code, this cell's included: a name it gave a value of its own is not a result's."""
    error = error or ""
    own = set().union(*map(_assigned, cells))
    results = latest(run, skip)
    undefined = _UNDEFINED.findall(error)
    if undefined:  # the last: in a chained traceback, the one the cell died of
        missing = undefined[-1]
        if missing in results or _says_enough(missing, code):
            return []
        if results:
            return [note("code_unknown_name", missing=missing,
                         names=_described(results, own))]
        return [note("code_undefined", missing=missing)]
    named = [name for name in sorted(_names(code)) if name in results and name not in own]
    if not named and _COPIED.search(error) and _copies(code, results):
        return [note("code_copied_result", names=_described(results, own))]
    if named and _MISREAD.search(error):
        return [note("code_result_shape", shapes="; ".join(
            f"{name} is {shape(results[name])}" for name in named))]
    return []


def shape(value: Any) -> str:
    """What a result is, in a few words: `a list of 3 dicts with keys item, quantity`."""
    if isinstance(value, dict):
        return f"a dict with keys {_keys(value)}" if value else "an empty dict"
    if isinstance(value, list):
        if not value:
            return "an empty list"
        kinds = {_kind(item) for item in value}
        of = kinds.pop() if len(kinds) == 1 else "values"
        n = len(value)
        if of == "dict":
            keys = _keys({k: None for item in value for k in item})
            return f"a list of {n} dict{'s' * (n != 1)} with keys {keys}"
        return f"a list of {n} {of}{'s' * (n != 1 and of != 'values')}"
    return "null" if value is None else f"a {_kind(value)}"


_COPIED = re.compile(r"^(SyntaxError|json\.decoder\.JSONDecodeError|JSONDecodeError)\b", re.M)
_MISREAD = re.compile(r"^(KeyError|IndexError|AttributeError: .* has no attribute|TypeError: .*"
                      r"(subscriptable|indices must be|not callable|not iterable|has no len))",
                      re.M)
_KINDS = ((bool, "boolean"), (int, "number"), (float, "number"), (str, "string"),
          (list, "list"), (dict, "dict"), (type(None), "null"))


def _kind(value: Any) -> str:
    return next((name for kind, name in _KINDS if isinstance(value, kind)), "value")


def _keys(d: dict, most: int = 8) -> str:
    keys = [str(k) for k in d]
    return ", ".join(keys[:most]) + (f" and {len(keys) - most} more" if len(keys) > most else "")


def _assigned(code: str) -> set[str]:
    """The names a cell gives values of its own: assigned, defined, imported."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _says_enough(missing: str, code: str) -> bool:
    """Whether Python's own error says it: a function never defined, or a module used
    (`math.pi`) and never imported."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == missing:
            return True
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == missing and missing in sys.stdlib_module_names:
            return True
    return False


def _copies(code: str, results: dict[str, Any]) -> bool:
    """Whether the code holds a result's keys or text: copied into a literal, not read from
    its variable."""
    return any(text in code for text in _texts(list(results.values()), [], 2000))


def _texts(data: Any, out: list[str], most: int) -> list[str]:
    """The keys and strings of JSON data of 3 characters or more, up to `most` of them."""
    if len(out) >= most:
        return out
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and len(key) >= 3:
                out.append(key)
            _texts(value, out, most)
    elif isinstance(data, list):
        for value in data:
            _texts(value, out, most)
    elif isinstance(data, str) and len(data) >= 3:
        out.append(data)
    return out


def _described(results: dict[str, Any], own: set[str]) -> str:
    """Each result's name and shape; no shape for a name the code also gave a value of its
    own, which the variable may hold instead."""
    return ", ".join(name if name in own else f"{name} ({shape(value)})"
                     for name, value in sorted(results.items()))


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
