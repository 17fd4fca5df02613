"""A code cell as the model wrote it, made runnable where that is safe.

Small models sometimes write several statements on one line (`total = 0 for i in range(10):
total += i print(total)`); Python's error points at the column where the next statement
begins, which they do not read as "put a newline here". When splitting the line there (at
bracket depth 0, never inside a string) makes the cell compile, the split cell runs and the
model is told why. Code that compiles is never touched.
"""

from __future__ import annotations

import ast
import io
import keyword
import re
import textwrap
import tokenize
from dataclasses import dataclass

from ..notes import note

_MAX_SPLITS = 50
_SHELL = re.compile(r"\s*(!|%)?(pip3?|python3? -m pip|conda|apt(-get)?|uv pip)\s+install\b")


@dataclass(frozen=True)
class Cell:
    code: str
    """What runs."""
    note: str | None = None
    """What the model is told about it: the cell was split, or how to write it."""
    runs: bool = True
    """False when statements ran together and no split is safe: `note` says what to do."""


def prepare(code: str) -> Cell:
    # Models often indent a whole cell, which Python refuses ("unexpected indent"); removing
    # the indent all lines share changes no cell that would have run as sent.
    code = textwrap.dedent(code)
    error = _error(code)
    if error is None:
        return Cell(code)
    if _SHELL.match(_line(code, error.lineno)):  # not Python, and there is no network
        return Cell(code, note("code_shell_install"), runs=False)
    if not error.msg.startswith("invalid syntax"):
        return Cell(code)
    fixed, splits, column = code, 0, error.offset or 0
    while error is not None and splits < _MAX_SPLITS:
        where = _boundary(fixed, error)
        if where is None:
            break
        lines = fixed.split("\n")
        line = lines[where[0] - 1]
        head, tail = line[: where[1]].rstrip(), line[where[1]:]
        if head.strip().isidentifier() and not keyword.iskeyword(head.strip()):
            break  # `pip list`, `print x`: words, not statements that ran together
        if head.endswith(":"):  # a block header whose body is a block header: no safe split
            return Cell(code, note("code_ran_together", column=column), runs=False)
        indent = line[: len(line) - len(line.lstrip())]
        lines[where[0] - 1: where[0]] = [head, indent + tail]
        fixed, splits = "\n".join(lines), splits + 1
        error = _error(fixed)
    if error is None:
        return Cell(fixed, note("code_split", lines=len(fixed.splitlines())))
    if splits:  # they ran together, and the rest still does not compile: say how to write it
        return Cell(code, note("code_ran_together", column=column), runs=False)
    return Cell(code)  # another mistake: Python's own error says it best


def assigned_last(code: str) -> str | None:
    """The name a cell's last statement assigns (`total = sum(...)`), if it is one name."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError):
        return None
    last = body[-1] if body else None
    targets = last.targets if isinstance(last, ast.Assign) else \
        [last.target] if isinstance(last, (ast.AugAssign, ast.AnnAssign)) else []
    return targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else None


def missing_module(error: str | None) -> str | None:
    """For a cell that imported a module that is not there: that nothing can be installed,
    and the standard library's modules nearest its name (`mathx`: math). The 1.5B model
    otherwise set out to install it, and gave up."""
    found = _NO_MODULE.search(error or "")
    if not found:
        return None
    import difflib
    import sys

    wanted = found.group(1)
    if "." in wanted:  # `json.foo`: its package is there; no name near it is the fix
        return note("code_no_module", module=wanted, nearest="")
    # close enough for a slip (mathx, colections), not for a package that is not there
    # (sympy is not smtpd)
    nearest = difflib.get_close_matches(
        wanted, [m for m in sys.stdlib_module_names if not m.startswith("_")], n=3, cutoff=0.75)
    return note("code_no_module", module=wanted, nearest=note(
        "code_nearest_modules", names=", ".join(nearest)) if nearest else "")


_NO_MODULE = re.compile(r"^ModuleNotFoundError: No module named '([\w.]+)'", re.M)


def _line(code: str, lineno: int | None) -> str:
    lines = code.split("\n")
    return lines[lineno - 1] if lineno and 0 < lineno <= len(lines) else ""


def _error(code: str) -> SyntaxError | None:
    try:
        compile(code, "<cell>", "exec")
    except SyntaxError as exc:
        return exc
    except ValueError:  # null bytes: not ours to fix
        return None
    return None


def _boundary(code: str, error: SyntaxError) -> tuple[int, int] | None:
    """(line, column) where the statement the error points at begins, when a name starts
    there at bracket depth 0 after something else on its line; else None."""
    if error.lineno is None or not error.offset:
        return None
    target, depth, first_on_line = (error.lineno, error.offset - 1), 0, {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                            tokenize.COMMENT, tokenize.ENCODING):
                continue
            first_on_line.setdefault(tok.start[0], tok.start)
            if tok.start == target:
                starts_line = first_on_line[tok.start[0]] == tok.start
                return target if tok.type == tokenize.NAME and depth == 0 \
                    and not starts_line else None
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
            if tok.start > target:
                return None
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return None
