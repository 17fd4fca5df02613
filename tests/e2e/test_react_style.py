"""`--prompt-style react` on a real GGUF model: free text, a stop on Observation:, the dialect read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'jsonagent[local,server]')")

from jsonagent import read_journal  # noqa: E402
from jsonagent.envelope import parse_reply  # noqa: E402
from jsonagent.models.local import LocalConfig, LocalModel  # noqa: E402
from jsonagent.prompt import prompt_style  # noqa: E402
from jsonagent.state import Message  # noqa: E402
from jsonagent.tools.toolset import Toolset  # noqa: E402


def test_local_backend_stops_before_a_made_up_observation(gguf):
    """The stop ends the reply where the tool's result would begin; without it the model goes on."""
    style, toolset = prompt_style("react"), Toolset.build(None)
    history = [Message(role="system", content=style.system(toolset)),
               Message(role="user", content="What is 2**100? Use code.")]
    model = LocalModel(gguf, LocalConfig(n_ctx=2048, max_tokens=160))
    try:
        free = model.complete(style.render(history), None)
        stopped = model.complete(style.render(history), None, stop=style.stop)
    finally:
        model.close()
    assert "Observation:" not in stopped.text
    if "Observation:" in free.text:  # the same greedy reply, cut where the stop begins
        assert free.text.startswith(stopped.text.rstrip())


def test_cli_run_in_the_react_style(gguf, tmp_path):
    transcript = tmp_path / "react.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "jsonagent", "run", "What is 2**100? Use code.",
         "--model", f"local:{gguf}", "--prompt-style", "react", "--transcript", str(transcript),
         "--output", "json", "--no-input", "--max-steps", "2"],
        capture_output=True, text=True, env=dict(os.environ), timeout=300, stdin=subprocess.DEVNULL)
    result = json.loads(done.stdout)
    assert done.returncode == {"completed": 0, "failed": 1, "max_steps": 3, "needs_human": 4}[result["status"]]
    events = read_journal(transcript)
    assert events[0].config["prompt_style"] == "react"
    replies = [e.raw for e in events if e.type == "model_reply"]
    assert replies and not any("Observation:" in r for r in replies)
    # Every reply went through the ReAct dialect: a step whose repairs name it, or a precise
    # re-ask that points at a line of the reply.
    toolset = Toolset.build(None)
    for raw in replies:
        parsed = parse_reply(raw, toolset)
        assert "dialect:react" in parsed.repairs or getattr(parsed, "message", "").startswith("line "), raw
    steps = [e for e in events if e.type == "step"]
    assert all("dialect:react" in s.repairs for s in steps)
    assert len(replies) == result["stats"]["model_calls"]
