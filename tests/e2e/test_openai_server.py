"""The openai backend against a real llama.cpp server on 127.0.0.1, serving a real model.

The model is tiny (SmolLM2-135M), so these tests check mechanics, not answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'jsonagent[local,server]')")

from checks import (QUESTIONS, OrderDesk, assert_first_try_valid,  # noqa: E402
                    assert_transcript_complete, tools_that_ran)

from jsonagent import Agent, AgentConfig, read_journal  # noqa: E402
from jsonagent.models.openai import OpenAIModel  # noqa: E402
from jsonagent.tools.toolset import core_tools  # noqa: E402

EXIT = {"completed": 0, "failed": 1, "max_steps": 3, "needs_human": 4}


def _model(server) -> OpenAIModel:
    return OpenAIModel(server.model.stem, base_url=server.base_url, api_key="sk-local", temperature=0.0)


def test_schema_mode_every_reply_is_valid_on_the_first_try(llama_server, tmp_path):
    desk, model, acted = OrderDesk(), _model(llama_server), 0
    for i, question in enumerate(QUESTIONS):
        agent = Agent(model=model, tools=[*core_tools(), desk.tool], max_steps=2, ask_human=desk.human,
                      config=AgentConfig(json_mode="schema"), transcript=tmp_path / f"run{i}.jsonl")
        before = len(desk.calls), len(desk.questions)
        result = agent.run(question)

        assert result.json_mode == "schema"
        assert result.stats.invalid_replies == 0 and result.stats.reasks == 0 and result.stats.repairs == 0
        assert result.stats.model_calls == len(result.steps)
        assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
        events = assert_transcript_complete(tmp_path / f"run{i}.jsonl", result)
        assert_first_try_valid(events, agent.toolset)
        acted += tools_that_ran(result, desk, *before)
    assert acted, "no run called a tool"


def test_object_mode_runs_to_a_valid_end(llama_server, tmp_path):
    desk = OrderDesk()
    agent = Agent(model=_model(llama_server), tools=[desk.tool], max_steps=2,
                  config=AgentConfig(json_mode="object", max_reasks=1), transcript=tmp_path / "run.jsonl")
    result = agent.run(QUESTIONS[0])

    assert result.json_mode == "object"
    events = assert_transcript_complete(tmp_path / "run.jsonl", result)
    tools_that_ran(result, desk)
    replies = [e for e in events if e.type == "model_reply"]
    assert replies and all(e.json_mode == "object" for e in replies)
    for reply in replies:  # the server's JSON grammar keeps every reply a JSON object
        assert reply.raw.lstrip().startswith("{"), reply.raw


def test_cli_run_through_the_server(llama_server, tmp_path):
    transcript = tmp_path / "cli.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "jsonagent", "run", "What time is it now in UTC?",
         "--model", llama_server.model.stem, "--base-url", llama_server.base_url,
         "--json-mode", "schema", "--transcript", str(transcript), "--output", "json",
         "--no-input", "--max-steps", "1"],
        capture_output=True, text=True, env={**os.environ, "OPENAI_API_KEY": "sk-local"},
        timeout=600, stdin=subprocess.DEVNULL)
    result = json.loads(done.stdout)
    assert done.returncode == EXIT[result["status"]], done.stderr
    assert result["json_mode"] == "schema"
    events = read_journal(transcript)
    # the server's grammar shapes every reply; a sampled 135M model may still run out of
    # tokens inside a string now and then, which is a re-ask, not a malformed reply
    for reply in (e for e in events if e.type == "model_reply"):
        assert reply.raw.lstrip().startswith('{'), reply.raw
    assert events[0].type == "run_start" and events[-1].type == "run_end"
    assert events[-1].status == result["status"]
    assert len([e for e in events if e.type == "model_reply"]) == result["stats"]["model_calls"]
