"""The in-process local backend on a real GGUF model: grammars, prefix reuse, whole runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'jsonagent[local,server]')")

from checks import (QUESTIONS, OrderDesk, assert_first_try_valid,  # noqa: E402
                    assert_transcript_complete, tools_that_ran)

from jsonagent import Agent, ResponseFormatRejected, read_journal  # noqa: E402
from jsonagent.envelope import Parsed, parse_reply, response_format  # noqa: E402
from jsonagent.models.decoding import CLOSING_RESERVE  # noqa: E402
from jsonagent.models.local import LocalConfig, LocalModel  # noqa: E402
from jsonagent.prompt import system_prompt  # noqa: E402
from jsonagent.tools.toolset import Toolset, core_tools  # noqa: E402


@pytest.fixture(scope="session")
def local_model(gguf):
    # room for the 135M model to close its JSON: a reply cut off inside a string is invalid
    model = LocalModel(gguf, LocalConfig(n_ctx=4096, max_tokens=1024))
    yield model
    model.close()


def _messages(toolset: Toolset, question: str) -> list[dict]:
    return [{"role": "system", "content": system_prompt(toolset)}, {"role": "user", "content": question}]


def test_schema_grammar_gives_a_valid_step(local_model):
    toolset = Toolset.build(None)
    # with the loop's cap on the thought, as a run has it: a 135M model may ramble on in there
    fmt = response_format("schema", toolset, thought_max=120)
    reply = local_model.complete(_messages(toolset, "What time is it in UTC?"), fmt)
    parsed = parse_reply(reply.text, toolset)
    assert isinstance(parsed, Parsed) and parsed.repairs == [], reply.text
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0


def test_object_grammar_gives_json_and_no_format_gives_text(local_model, monkeypatch):
    monkeypatch.setattr(local_model.config, "max_tokens", 48)  # a tiny model may ramble on
    messages = _messages(Toolset.build(None), "Say hello.")
    reply = local_model.complete(messages, {"type": "json_object"})
    assert isinstance(json.loads(reply.text), dict)  # closed in time, even if cut short
    assert local_model.complete(messages, None).text.strip()


def test_a_reply_out_of_tokens_still_closes_valid_and_says_it_was_cut(local_model, monkeypatch):
    monkeypatch.setattr(local_model.config, "max_tokens", 40)
    toolset = Toolset.build(None)
    question = "Write a 500-word essay about the sea, then finish with it as your answer."
    reply = local_model.complete(_messages(toolset, question), response_format("schema", toolset))
    parsed = parse_reply(reply.text, toolset)  # valid by construction: no repair needed
    assert isinstance(parsed, Parsed) and parsed.repairs == [], reply.text
    assert reply.cut and reply.usage.completion_tokens <= 40 + CLOSING_RESERVE


@pytest.mark.parametrize("turn", ["9", "8628034"])
def test_a_runaway_reply_is_closed_long_before_the_cap(local_model, monkeypatch, turn):
    from jsonagent.models import decoding

    digits = [local_model._llm.tokenize(d.encode(), add_bos=False, special=False)[0] for d in turn]
    pick, picked = decoding.Sampler.pick, []

    def stuck(self, logits):  # the model's `99999...` or `86280348628034...`, wherever it fits
        digit = digits[len(picked) % len(digits)]
        if not np.isfinite(logits[digit]):
            return pick(self, logits)
        picked.append(digit)
        return digit

    monkeypatch.setattr(decoding.Sampler, "pick", stuck)
    toolset = Toolset.build(None)
    messages = _messages(toolset, "What is 2 + 2?")
    reply = local_model.complete(messages, response_format("schema", toolset))
    parsed = parse_reply(reply.text, toolset)
    # (a pick the schema refuses is asked again, so the turn may start at any of its digits)
    assert isinstance(parsed, Parsed) and turn * 8 in parsed.step.thought, reply.text
    assert reply.cut and reply.usage.completion_tokens <= decoding.RUNAWAY + CLOSING_RESERVE
    # without a schema there is nothing to close: the reply just stops there
    free = local_model.complete(messages, None)
    assert free.cut and len(free.text) == decoding.RUNAWAY and free.text in turn * decoding.RUNAWAY


def test_a_response_format_without_a_schema_is_rejected(local_model):
    with pytest.raises(ResponseFormatRejected):
        local_model.complete([{"role": "user", "content": "hi"}], {"type": "json_schema", "json_schema": {}})


def test_prompt_prefix_is_reused_from_the_kv_cache(local_model):
    toolset = Toolset.build(None)
    fmt = response_format("schema", toolset)
    first_messages = _messages(toolset, "What time is it in UTC?")
    first = local_model.complete(first_messages, fmt)
    second = local_model.complete(
        first_messages + [{"role": "assistant", "content": first.text},
                          {"role": "user", "content": '{"tool_name": "GetTimeTools", "response": "12:00"}'}], fmt)
    # everything up to the new messages was already in the cache (a token or two may re-split)
    assert second.usage.cached_tokens >= first.usage.prompt_tokens - 2
    assert second.usage.cached_tokens < second.usage.prompt_tokens


def test_a_template_without_a_tool_turn_gets_results_as_the_user(local_model):
    # SmolLM2's ChatML template prints any role it is given; it has no tool turn of its own
    assert local_model.observation_role == "user"
    assert Agent(model=local_model, tools=[]).config.observation_role == "user"


def test_whole_runs_in_process(local_model, tmp_path):
    desk, acted = OrderDesk(), 0
    for i, question in enumerate(QUESTIONS):
        agent = Agent(model=local_model, tools=[*core_tools(), desk.tool], max_steps=2,
                      ask_human=desk.human, transcript=tmp_path / f"run{i}.jsonl")
        before = len(desk.calls), len(desk.questions)
        result = agent.run(question)

        assert result.json_mode == "schema"  # the local backend's default
        events = assert_transcript_complete(tmp_path / f"run{i}.jsonl", result)
        # the grammar shapes every reply; one it had to steer to a close at its token limit
        # (the 135M model repeats a clause) was cut, and is asked again, never run (issue 58)
        cut = [e for e in events if e.type == "model_reply" and e.finish_reason == "length"]
        assert result.stats.invalid_replies == len(cut)
        assert all(e.stage == "cut" for e in events if e.type == "reask")
        assert_first_try_valid(events, agent.toolset, attempts=not cut)
        acted += tools_that_ran(result, desk, *before)
        replies = [e for e in events if e.type == "model_reply"]
        for later in replies[1:]:  # each step reuses the system prompt and the history so far
            assert later.usage.cached_tokens > 0.5 * later.usage.prompt_tokens
    assert acted, "no run called a tool"


def test_cli_model_local_path(gguf, tmp_path):
    transcript = tmp_path / "cli.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "jsonagent", "run", "What time is it now in UTC?",
         "--model", f"local:{gguf}", "--transcript", str(transcript), "--output", "json",
         "--no-input", "--max-steps", "1"],
        capture_output=True, text=True, env=dict(os.environ), timeout=300, stdin=subprocess.DEVNULL)
    result = json.loads(done.stdout)
    assert done.returncode == {"completed": 0, "failed": 1, "max_steps": 3, "needs_human": 4}[result["status"]]
    events = read_journal(transcript)
    cut = [e for e in events if e.type == "model_reply" and e.finish_reason == "length"]
    assert result["json_mode"] == "schema" and result["stats"]["invalid_replies"] == len(cut)
    assert events[0].type == "run_start" and events[-1].type == "run_end"
    assert len([e for e in events if e.type == "model_reply"]) == result["stats"]["model_calls"]


def test_default_local_model_comes_from_the_environment(gguf, monkeypatch):
    monkeypatch.setenv("JSONAGENT_LOCAL_MODEL", str(gguf))
    model = LocalModel.from_spec(None, LocalConfig(n_ctx=512))
    try:
        assert model.path == gguf and model.name == f"local:{gguf.name}"
    finally:
        model.close()


@pytest.mark.parametrize("decoder", ["llguidance", "grammar"])
def test_a_cancel_stops_local_decoding_at_the_next_token(local_model, monkeypatch, decoder):
    """Both decoders: a reply is cut at the next token once the run is cancelled (and the
    grammar path decodes at all)."""
    from jsonagent import CancelToken, Cancelled

    if decoder == "grammar":  # llama.cpp's own loop under a GBNF grammar, as without llguidance
        monkeypatch.setattr(local_model, "_guide", None)
    monkeypatch.setattr(local_model.config, "max_tokens", 48)
    toolset = Toolset.build(None)
    fmt = response_format("schema", toolset, thought_max=120)
    messages = _messages(toolset, "What time is it in UTC?")
    token = CancelToken()
    reply = token.call_here(local_model.complete, messages, fmt)  # runs to its end uncancelled
    assert reply.text.startswith('{"thought": ') and reply.usage.completion_tokens > 0
    # cancelled as its first piece arrives, not after a time: a fast machine had written the
    # whole (short) object within half a second, and nothing was left to cut
    token = CancelToken()
    long = _messages(toolset, "Write a 500-word essay about the sea, then finish with it.")
    monkeypatch.setattr(local_model.config, "max_tokens", 1024)
    pieces = []

    def first_piece_cancels(piece: str) -> None:
        pieces.append(piece)
        token.cancel()

    with pytest.raises(Cancelled):
        token.call_here(local_model.complete, long, response_format("object", toolset),
                        on_delta=first_piece_cancels)
    assert len(pieces) <= 2, pieces  # the piece that cancelled, and at most the one in flight
    token = CancelToken()
    assert token.call_here(local_model.complete, messages, fmt).text  # the model is free again
