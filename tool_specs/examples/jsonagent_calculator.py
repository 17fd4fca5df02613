"""The calculator example tool: arithmetic parsed with `ast`, never `eval`.

Only numbers, + - * / // % **, parentheses and a few math functions are accepted, and work
too large to finish (9**9**9, a million-digit product) is refused before it starts.
"""

from __future__ import annotations

import ast
import math
import operator

from jsonagent import ToolError

MAX_CHARS = 500
MAX_BITS = 4096  # an integer result of more than ~1,200 digits is refused
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
        ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCS = {"sqrt": math.sqrt, "sin": math.sin, "cos": math.cos, "tan": math.tan,
          "log": math.log, "log10": math.log10, "exp": math.exp, "abs": abs, "round": round,
          "floor": math.floor, "ceil": math.ceil}
_NAMES = {"pi": math.pi, "e": math.e, "tau": math.tau}


def calculate(expression: str) -> dict:
    if len(expression) > MAX_CHARS:
        raise ToolError(f"expression too long ({len(expression)} characters, at most {MAX_CHARS})")
    try:
        tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not arithmetic: {exc.msg} at column {exc.offset}") from None
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except (OverflowError, ValueError) as exc:
        raise ToolError(f"cannot compute: {exc}") from None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    return {"expression": expression, "result": value}


def _eval(node: ast.AST):
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        left, right = _eval(node.left), _eval(node.right)
        _check_size(node.op, left, right)
        return _BIN[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in _FUNCS and not node.keywords:
        return _FUNCS[node.func.id](*[_eval(a) for a in node.args])
    what = ast.unparse(node) if hasattr(ast, "unparse") else type(node).__name__
    raise ToolError(f"not allowed in a calculation: {what!r}; use numbers, + - * / // % **, "
                    f"parentheses, {', '.join(sorted(_NAMES))} and {', '.join(sorted(_FUNCS))}()")


def _bits(x) -> float:
    return math.log2(abs(x)) if x else 0.0


def _check_size(op: ast.operator, left, right) -> None:
    """Refuse an integer result that would take too long to compute or print."""
    if not (isinstance(left, int) and isinstance(right, int)):
        return
    if isinstance(op, ast.Pow):
        estimate = right * _bits(left) if right > 0 and abs(left) > 1 else 0
    elif isinstance(op, ast.Mult):
        estimate = _bits(left) + _bits(right)
    else:
        estimate = max(_bits(left), _bits(right))
    if estimate > MAX_BITS:
        raise ToolError(f"the result would have about {int(estimate * 0.30103) + 1:,} digits; "
                        f"the calculator stops at {int(MAX_BITS * 0.30103):,}")
