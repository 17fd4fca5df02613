"""Stall detection: told once, then the run ends stalled (exit 5), with the repeated call."""

import json
import os
import subprocess
import sys

from jsonagent import Agent, AgentConfig, read_journal, tool
from jsonagent.testing import ScriptedModel, step

DONE = step("TaskCompleteTool", {"output": "42"})
UTC = step("GetTimeTools", {"timezone": "UTC"})
PARIS = step("GetTimeTools", {"timezone": "Europe/Paris"})


def notes(model):
    """The note on each observation the model saw in its last request."""
    bodies = [json.loads(m["content"]) for m in model.requests[-1]["messages"]
              if m["role"] == "user" and m["content"].startswith('{"tool_name"')]
    return [b.get("note") for b in bodies]


def test_the_second_same_call_is_pointed_out_plainly_and_the_model_can_recover():
    model = ScriptedModel([UTC, UTC, DONE])
    r = Agent(model=model).run("time?")
    assert r.status == "completed"
    said = notes(model)
    assert said[:1] == [None]
    assert "repeating yourself" in said[1] and "2 times" in said[1] and "TaskCompleteTool" in said[1]


def test_once_more_after_the_warning_ends_the_run_stalled(tmp_path):
    model = ScriptedModel([UTC, PARIS, UTC, UTC, DONE])
    r = Agent(model=model, transcript=tmp_path / "t.jsonl", max_steps=10).run("time?")
    assert r.status == "stalled" and not r.ok
    assert r.repeated == {"tool": "GetTimeTools", "args": {"timezone": "UTC"}}
    assert len(r.steps) == 4 and r.steps[-1].observation is not None  # the history stays whole
    assert "GetTimeTools" in r.error and "3 times" in r.error
    events = read_journal(tmp_path / "t.jsonl")
    assert [e.note is not None for e in events if e.type == "tool_result"] == \
        [False, False, True, False]
    assert events[-1].type == "run_end" and events[-1].status == "stalled"


def test_in_schema_mode_the_step_after_the_warning_cannot_call_that_tool():
    model = ScriptedModel([UTC, UTC, DONE])
    r = Agent(model=model, config=AgentConfig(json_mode="schema")).run("time?")
    assert r.status == "completed"

    def tools(request):
        return [a["properties"]["tool_name"]["const"]
                for a in request["response_format"]["json_schema"]["schema"]["anyOf"]]

    everything = tools(model.requests[0])
    assert "GetTimeTools" in everything and tools(model.requests[1]) == everything
    assert tools(model.requests[2]) == [t for t in everything if t != "GetTimeTools"]


def test_a_costly_grammar_still_masks_the_step_after_the_warning():
    """A server whose grammar slows every token gets none on a step's first try, except on
    the step the stall mask needs it for."""
    model = ScriptedModel([UTC, UTC, DONE])
    model.grammar_costly = True
    r = Agent(model=model, config=AgentConfig(json_mode="schema")).run("time?")
    assert r.status == "completed"
    sent = [req["response_format"] for req in model.requests]
    assert sent[:2] == [None, None]
    masked = [a["properties"]["tool_name"]["const"]
              for a in sent[2]["json_schema"]["schema"]["anyOf"]]
    assert "GetTimeTools" not in masked and "TaskCompleteTool" in masked


def test_the_same_result_from_different_calls_counts_too():
    @tool
    def search(query: str) -> str:
        """Search."""
        return "nothing found"

    model = ScriptedModel([step("search", {"query": q}) for q in "abc"] + [DONE])
    r = Agent(model=model, tools=[search]).run("find it")
    assert r.status == "stalled" and r.repeated == {"tool": "search", "args": {"query": "c"}}
    assert "result" in r.error


def test_a_repeatable_tool_may_repeat():
    @tool(repeatable=True)
    def job_status() -> str:
        """Poll the job."""
        return "running"

    model = ScriptedModel([step("job_status")] * 6 + [DONE])
    r = Agent(model=model, tools=[job_status], max_steps=10).run("wait for the job")
    assert r.status == "completed" and notes(model) == [None] * 6


def test_stall_detection_can_be_turned_off():
    r = Agent(model=ScriptedModel([UTC] * 5), max_steps=5,
              config=AgentConfig(stall_after=None)).run("x")
    assert r.status == "max_steps"


def test_stall_after_is_configurable():
    r = Agent(model=ScriptedModel([UTC] * 4), config=AgentConfig(stall_after=3)).run("x")
    assert r.status == "stalled" and len(r.steps) == 4


def test_a_spec_file_can_mark_a_tool_repeatable(tmp_path):
    from jsonagent.tools.specs import ToolSpec

    spec = ToolSpec.from_dict({"name": "poll", "description": "poll", "repeatable": True})
    assert spec.repeatable and not ToolSpec.from_dict({"name": "poll"}).repeatable


def test_cli_exit_5_when_stalled(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps([json.dumps(UTC)] * 5))
    transcript = tmp_path / "t.jsonl"
    proc = subprocess.run([sys.executable, "-m", "jsonagent", "run", "x", "--model",
                           f"scripted:{path}", "--transcript", str(transcript), "--output", "json"],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert proc.returncode == 5, proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "stalled"
    assert data["repeated"] == {"tool": "GetTimeTools", "args": {"timezone": "UTC"}}
    assert read_journal(transcript)[-1].status == "stalled"
