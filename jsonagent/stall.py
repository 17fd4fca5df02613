"""Stall detection: a run whose model keeps making the same call, or keeps getting the same
result, is told so once, and then ends `stalled` instead of burning its remaining steps.

Small models loop: the same call again and again, or two calls in turn, while their thought
already holds the answer. Words alone rarely stop them: a note on the first repeat broke
none of the 4 loops it met in schema mode on the 1.5B model (bench/results). What does is
the mask: in schema mode the step after the warning cannot call that tool at all, its
alternative leaves the grammar for one step (the loop's `_warned_tool`), which broke 7 of 7
loops where the words broke none (bench/results/stall_mask). So the warning comes with the
second identical call (`AgentConfig.stall_after`), and the third ends the run. In the 24-task
experiment that chose it, this saved a step in every loop and lost no task: 14/24 either way
(bench/results/.../round3). Tools whose spec says `repeatable` (polling) are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .state import StepRecord


@dataclass(frozen=True)
class Verdict:
    action: Literal["warn", "stop"]
    kind: Literal["call", "result"]
    """What repeats: the call itself (tool and arguments), or the result it got."""
    count: int


def check(steps: list[StepRecord], after: int | None) -> Verdict | None:
    """Judge the last step, whose observations are in: None, or warn (it is the `after`-th
    repeat), or stop (it repeats again after the warning). A step of several calls repeats
    another when their sets of calls (or of results) are the same, in any order."""
    if after is None or not steps:
        return None
    last = steps[-1].calls
    if len(last) == 1:  # the usual step: compared without building a thing
        tool, args, observation = last[0].tool, last[0].args, last[0].observation
        calls = results = 0
        for s in steps:
            call = s.calls[0]
            if call.tool == tool and len(s.calls) == 1:
                calls += call.args == args
                results += call.observation == observation
    else:
        mine = [(c.tool, c.args) for c in last]
        got = [(c.tool, c.observation) for c in last]
        calls = sum(_same([(c.tool, c.args) for c in s.calls], mine) for s in steps)
        results = sum(_same([(c.tool, c.observation) for c in s.calls], got) for s in steps)
    kind, count = ("call", calls) if calls >= results else ("result", results)
    if count > after:
        return Verdict("stop", kind, count)
    if count == after:
        return Verdict("warn", kind, count)
    return None


def _same(these: list, those: list) -> bool:
    """The same items, in any order (they hold dicts: no sets)."""
    if len(these) != len(those):
        return False
    left = list(those)
    for item in these:
        if item not in left:
            return False
        left.remove(item)
    return True
