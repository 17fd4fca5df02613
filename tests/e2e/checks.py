"""Assertions about the mechanics of a real run, whatever the model chose to do."""

from __future__ import annotations

import json
from pathlib import Path

from jsonagent import RunResult, read_journal
from jsonagent.envelope import Parsed, parse_reply

STATUSES = {"completed", "max_steps", "needs_human", "failed", "interrupted"}


def assert_transcript_complete(path: Path, result: RunResult, tools_called: list[tuple[str, dict]]) -> list:
    """The transcript holds every event of the run, and agrees with the RunResult.

    `tools_called` is what the test's own tools recorded: each non-final step must have
    really run its tool, with the arguments the model gave.
    """
    assert result.status in STATUSES
    events = read_journal(path)
    kinds = [e.type for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end", kinds
    assert events[-1].status == result.status
    replies = [e for e in events if e.type == "model_reply"]
    assert len(replies) == result.stats.model_calls
    assert [e.step for e in events if e.type == "step"] == [s.index for s in result.steps]
    assert kinds.count("reask") == result.stats.reasks

    results = {e.step: e for e in events if e.type == "tool_result"}
    final = result.steps[-1].index if result.status == "completed" else None
    acted = [s for s in result.steps if s.index != final and s.tool != "AskHumanHelpTool"]
    for step in acted:
        assert step.index in results, f"step {step.index} ({step.tool}) has no tool_result"
        assert results[step.index].tool == step.tool
    spied = [s for s in acted if s.tool in {name for name, _ in tools_called}]
    assert [(s.tool, s.args) for s in spied] == [c for c in tools_called if c[0] in {s.tool for s in spied}]
    return events


def assert_first_try_valid(events: list, toolset) -> None:
    """Schema mode: every raw reply is strict JSON and a valid step, with nothing repaired."""
    replies = [e for e in events if e.type == "model_reply"]
    assert replies
    for reply in replies:
        assert reply.json_mode == "schema", "the endpoint stepped down from schema mode"
        json.loads(reply.raw)  # strict JSON, no repair
        parsed = parse_reply(reply.raw, toolset)
        assert isinstance(parsed, Parsed), f"invalid reply {reply.raw!r}: {parsed.message}"
        assert parsed.repairs == [], parsed.repairs
        assert reply.attempt == 0
