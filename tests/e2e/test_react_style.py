"""`--prompt-style react` on a real GGUF model: free text, a stop on Observation:, the dialect read."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'jsonagent[local,server]')")

from jsonagent import Agent, AgentConfig, read_journal  # noqa: E402
from jsonagent.envelope import parse_reply  # noqa: E402
from jsonagent.models.local import LocalConfig, LocalModel  # noqa: E402
from jsonagent.prompt import prompt_style  # noqa: E402
from jsonagent.state import Message  # noqa: E402
from jsonagent.testing import step  # noqa: E402
from jsonagent.tools.toolset import Toolset  # noqa: E402


def test_local_model_continues_a_react_history_and_the_dialect_reads_it(gguf):
    """One ReAct exchange in the history, rendered by the style; the model's next reply is read
    through the ReAct dialect, and the stop keeps it from writing an Observation itself."""
    style, toolset = prompt_style("react"), Toolset.build(None)
    history = [
        Message(role="system", content=style.system(toolset)),
        Message(role="user", content="What is 2**100? Use code."),
        Message(role="assistant", content=json.dumps(step("CodeInterpreterTool", {"code": "print(2**100)"},
                                                          "I will compute it with code."))),
        Message(role="observation", content=json.dumps({"tool_name": "CodeInterpreterTool", "response": {
            "stdout": "1267650600228229401496703205376\n", "exit_code": 0}})),
    ]
    model = LocalModel(gguf, LocalConfig(n_ctx=2048, max_tokens=80))
    try:
        reply = model.complete(style.render(history), style.response_format("schema", toolset),
                               stop=style.stop)
    finally:
        model.close()
    assert "Observation:" not in reply.text
    parsed = parse_reply(reply.text, toolset)  # a step, or a precise re-ask: read either way
    assert "dialect:react" in parsed.repairs, reply.text


def test_a_whole_run_in_the_react_style(gguf, tmp_path):
    """What `--prompt-style react --model local:...` builds, with short replies and no re-ask so
    that it stays quick (the flag's wiring is tested against a stub endpoint in test_dialects)."""
    model = LocalModel(gguf, LocalConfig(n_ctx=2048, max_tokens=80))
    try:
        agent = Agent(model=model, max_steps=1, transcript=tmp_path / "react.jsonl",
                      config=AgentConfig(prompt_style="react", max_reasks=0))
        result = agent.run("What is 2**100? Use code.")
    finally:
        model.close()
    events = read_journal(tmp_path / "react.jsonl")
    assert events[0].config["prompt_style"] == "react" and events[-1].type == "run_end"
    replies = [e.raw for e in events if e.type == "model_reply"]
    assert len(replies) == result.stats.model_calls == 1
    assert "Observation:" not in replies[0]  # the stop reached llama.cpp
    assert all("dialect:react" in s.repairs or s.repairs == [] for s in result.steps)
