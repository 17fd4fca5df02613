"""The tool trajectory: the calls a run made, matched against the calls a case expects.

Modes (the calls are the run's steps, the task-complete call left out):
    exact      the same calls in the same order, nothing else
    in_order   the expected calls appear in this order; other calls may come between
    any_order  the same calls in any order, nothing else
    subset     every call made was expected (some expected ones may be missing)
    superset   every expected call was made (other calls may be made too)

Calls count: one expected call pairs with one call made, so two expected searches need two.
Each expected call's arguments match `exact`ly, `partial`ly (only the keys it gives, each
equal) or are `ignore`d. The score is the share of calls matched, so an exact match is 1.0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["exact", "in_order", "any_order", "subset", "superset"]
ArgsMatch = Literal["exact", "partial", "ignore"]
MODES: tuple[str, ...] = ("exact", "in_order", "any_order", "subset", "superset")


@dataclass
class Call:
    """One call a case expects: the tool, and the arguments to compare (see `args_match`)."""

    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    args_match: ArgsMatch | None = None
    """None takes the trajectory's own."""


def matches(expected: Call, tool: str, args: dict[str, Any], default: ArgsMatch) -> bool:
    if expected.tool != tool:
        return False
    how = expected.args_match or default
    if how == "ignore":
        return True
    if how == "exact":
        return expected.args == args
    return all(k in args and args[k] == v for k, v in expected.args.items())


def score(expected: list[Call], made: list[tuple[str, dict]], mode: Mode,
          args_match: ArgsMatch = "partial") -> tuple[float, str]:
    """The share of calls matched in `mode` (1.0 is a match), and why it is not 1.0."""
    def ok(i: int, j: int) -> bool:
        return matches(expected[i], made[j][0], made[j][1], args_match)

    if not expected and not made:
        return 1.0, "no calls, as expected"
    if mode == "exact":
        same = 0
        for i in range(min(len(expected), len(made))):
            if not ok(i, i):
                break
            same += 1
        total = max(len(expected), len(made))
        if same == total:
            return 1.0, f"the {total} calls match, in order"
        return same / total, _first_difference(expected, made, same)
    if mode == "in_order":
        got = _in_order(expected, made, ok)
        return (got / len(expected) if expected else 1.0,
                f"{got} of {len(expected)} expected calls made in order"
                + _missing(expected, made, ok))
    pairs = _pairs(len(expected), len(made), ok)
    if mode == "any_order":
        total = max(len(expected), len(made))
        return pairs / total, f"{pairs} of {total} calls paired in any order" \
            + _missing(expected, made, ok) + _extra(expected, made, ok)
    if mode == "subset":
        return (pairs / len(made) if made else 1.0,
                f"{pairs} of {len(made)} calls made were expected" + _extra(expected, made, ok))
    if mode == "superset":
        return (pairs / len(expected) if expected else 1.0,
                f"{pairs} of {len(expected)} expected calls made" + _missing(expected, made, ok))
    raise ValueError(f"unknown trajectory mode {mode!r}: use one of {', '.join(MODES)}")


def _in_order(expected: list[Call], made: list, ok) -> int:
    """How many expected calls were made in their order (other calls may come between)."""
    # longest common subsequence, so one early mismatch does not hide later matches
    rows = [[0] * (len(made) + 1) for _ in range(len(expected) + 1)]
    for i in range(len(expected)):
        for j in range(len(made)):
            rows[i + 1][j + 1] = rows[i][j] + 1 if ok(i, j) else max(rows[i][j + 1],
                                                                        rows[i + 1][j])
    return rows[-1][-1]


def _pairs(n_expected: int, n_made: int, ok) -> int:
    """The most expected calls paired with distinct calls made (bipartite matching), so a
    loose early pairing never steals the only partner of a later call."""
    partner: dict[int, int] = {}

    def place(i: int, seen: set[int]) -> bool:
        for j in range(n_made):
            if j not in seen and ok(i, j):
                seen.add(j)
                if j not in partner or place(partner[j], seen):
                    partner[j] = i
                    return True
        return False

    return sum(place(i, set()) for i in range(n_expected))


def _show(tool: str, args: dict | None = None) -> str:
    import json

    return f"{tool} {json.dumps(args, ensure_ascii=False)}" if args else tool


def _first_difference(expected: list[Call], made: list, at: int) -> str:
    if at >= len(expected):
        return f"call {at + 1} was not expected: {_show(*made[at])}"
    if at >= len(made):
        return f"call {at + 1} is missing: {_show(expected[at].tool, expected[at].args)}"
    return (f"call {at + 1} differs: expected {_show(expected[at].tool, expected[at].args)}, "
            f"made {_show(*made[at])}")


def _missing(expected: list[Call], made: list, ok) -> str:
    gone = [e for i, e in enumerate(expected) if not any(ok(i, j) for j in range(len(made)))]
    return f"; never made: {_show(gone[0].tool, gone[0].args)}" if gone else ""


def _extra(expected: list[Call], made: list, ok) -> str:
    extra = [m for j, m in enumerate(made) if not any(ok(i, j) for i in range(len(expected)))]
    return f"; not expected: {_show(*extra[0])}" if extra else ""
