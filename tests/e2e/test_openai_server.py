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


def _model(server, **kw) -> OpenAIModel:
    """With the server's grammar on every request: these tests are about what it enforces.
    The first try without it (its grammar is costly, servers.py) is the CLI test's."""
    return OpenAIModel(server.model.stem, base_url=server.base_url, api_key="sk-local",
                       temperature=0.0, grammar_costly=False, **kw)


def test_schema_mode_replies_are_valid_or_cut_and_reasked(llama_server, tmp_path):
    """Schema mode: the server's grammar makes every reply it finishes a valid step, on the
    first try. It does not make the 135M model stop: it once wrote the same clause into one
    string for 3,534 tokens over 109 s (CI, round 7), and the re-ask that sent it back whole
    overflowed the 4,096-token window. So this checks what the product promises there: such a
    reply is cut at the request's cap (`max_tokens`, here 256 to keep the test short) and
    re-asked with only its head, and the run goes on to an end of its own, never `failed`."""
    desk, model, acted = OrderDesk(), _model(llama_server, max_tokens=256), 0
    for i, question in enumerate(QUESTIONS):
        agent = Agent(model=model, tools=[*core_tools(), desk.tool], max_steps=2, ask_human=desk.human,
                      config=AgentConfig(json_mode="schema"), transcript=tmp_path / f"run{i}.jsonl")
        before = len(desk.calls), len(desk.questions)
        result = agent.run(question)

        assert result.json_mode == "schema" and result.status != "failed", result.error
        assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
        events = assert_transcript_complete(tmp_path / f"run{i}.jsonl", result)
        replies = [e for e in events if e.type == "model_reply"]
        finished = [e for e in replies if e.finish_reason == "stop"]
        cut = [e for e in replies if e.finish_reason == "length"]
        assert len(finished) + len(cut) == len(replies) == result.stats.model_calls
        assert_first_try_valid(finished, agent.toolset, attempts=False)
        assert result.stats.invalid_replies <= len(cut)  # only a cut reply is ever re-asked
        for reply in cut:
            assert reply.usage.completion_tokens <= 256 + 1
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
    replies = [e for e in events if e.type == "model_reply"]
    # detected as llama-cpp-python: every try has the schema's grammar, the first too (asked
    # for without it first, 6 of 38 replies broke the envelope; issue 58)
    assert all(r.json_mode == "schema" for r in replies)
    # the grammar shapes every reply it is sent with; a 135M model may still run out of
    # tokens inside a string now and then, which is a re-ask, not a malformed reply
    for reply in (r for r in replies if r.json_mode == "schema"):
        assert reply.raw.lstrip().startswith('{'), reply.raw
    assert events[0].type == "run_start" and events[-1].type == "run_end"
    assert events[-1].status == result["status"]
    assert len([e for e in events if e.type == "model_reply"]) == result["stats"]["model_calls"]
