"""Assertions about the mechanics of a real run, whatever the model chose to do.

A 135M model picks tools badly, so no single run is sure to call one. Each test therefore
asks a few questions; every run must be mechanically sound, and across them at least one
tool must really have run.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo
from pathlib import Path

from jsonagent import RunResult, read_journal, tool
from jsonagent.envelope import Parsed, parse_reply

STATUSES = {"completed", "max_steps", "needs_human", "failed", "interrupted"}
QUESTIONS = [
    "What is the status of order 1234? Look it up.",
    "What time is it now in UTC?",
    "Look up order 42 and tell me its carrier.",
]


class OrderDesk:
    """A tool and a person that record every call, so a test can see they really ran."""

    ANSWER = "I don't know, please use your tools."

    def __init__(self):
        self.calls: list[dict] = []
        self.questions: list[str] = []

        @tool
        def lookup_order(order_id: int) -> dict:
            """Look up an order in the shop's database.

            Args:
                order_id: The order number.
            """
            self.calls.append({"order_id": order_id})
            return {"order_id": order_id, "status": "shipped", "carrier": "DHL"}

        self.tool = lookup_order

    def human(self, question: str) -> str:
        self.questions.append(question)
        return self.ANSWER


def tools_that_ran(result: RunResult, desk: OrderDesk, calls_before: int = 0, asked_before: int = 0) -> int:
    """Check every acted step's observation came from the real tool; return how many acted."""
    final = result.steps[-1].index if result.status == "completed" else None
    acted = [s for s in result.steps if s.index != final]
    orders = [s for s in acted if s.tool == "lookup_order"]
    assert [s.args for s in orders] == desk.calls[calls_before:]
    for step in orders:
        assert step.observation == {"order_id": step.args["order_id"], "status": "shipped", "carrier": "DHL"}
    asked = [s for s in acted if s.tool == "AskHumanHelpTool"]
    assert [s.args["question"] for s in asked] == desk.questions[asked_before:]
    assert all(s.observation == desk.ANSWER for s in asked)
    for step in acted:
        if step.tool == "GetTimeTools" and not step.error:  # the real clock answered
            zone = ZoneInfo(step.observation["timezone"]) if "/" in step.observation["timezone"] else None
            assert step.observation["weekday"] in {
                (datetime.now(timezone.utc) + timedelta(hours=h)).astimezone(zone).strftime("%A") for h in (-14, 0, 14)}
    return len(acted)


def assert_transcript_complete(path: Path, result: RunResult) -> list:
    """The transcript holds every event of the run, and agrees with the RunResult."""
    assert result.status in STATUSES
    events = read_journal(path)
    kinds = [e.type for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end", kinds
    assert events[-1].status == result.status
    assert len([e for e in events if e.type == "model_reply"]) == result.stats.model_calls
    assert [e.step for e in events if e.type == "step"] == [s.index for s in result.steps]
    assert kinds.count("reask") == result.stats.reasks
    results = {e.step: e for e in events if e.type == "tool_result"}
    final = result.steps[-1].index if result.status == "completed" else None
    for step in result.steps:
        if step.index != final:
            assert results[step.index].tool == step.tool
            assert results[step.index].observation == json.loads(json.dumps(step.observation, default=str))
    return events


def assert_first_try_valid(events: list, toolset, attempts: bool = True) -> None:
    """Schema mode: every raw reply is strict JSON and a valid step, with nothing repaired
    (`attempts`: and none of them answers a re-ask)."""
    replies = [e for e in events if e.type == "model_reply"]
    assert replies or not attempts
    for reply in replies:
        assert reply.json_mode == "schema", "the endpoint stepped down from schema mode"
        json.loads(reply.raw)  # strict JSON, no repair
        parsed = parse_reply(reply.raw, toolset)
        assert isinstance(parsed, Parsed), f"invalid reply {reply.raw!r}: {parsed.message}"
        assert parsed.repairs == [], parsed.repairs
        assert reply.attempt == 0 or not attempts
