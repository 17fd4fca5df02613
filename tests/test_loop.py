"""The loop: every way a run ends, re-asks, step-down, observations and the transcript."""

import asyncio
import json
import threading

import pytest
from pydantic import BaseModel, field_validator

from jsonagent import Agent, AgentConfig, ModelError, ResponseFormatRejected, read_journal, tool
from jsonagent.testing import ScriptedModel, step

DONE = step("TaskCompleteTool", {"output": "42"}, "done")


class FakeSandbox:
    """Stands in for the subprocess sandbox in loop tests; the real one has its own suite."""

    closed = False

    def run(self, code):
        from types import SimpleNamespace

        return SimpleNamespace(stdout=f"ran {len(code)} chars\n", stderr="", error=None, exit_code=0,
                               stdout_truncated=False, stderr_truncated=False, stdout_bytes=0,
                               stderr_bytes=0, timed_out=False, crashed=False,
                               state_lost=code == "lose", files_changed=[])

    def close(self):
        FakeSandbox.closed = True


def agent(replies, **kw):
    kw.setdefault("sandbox_factory", FakeSandbox)
    return Agent(model=ScriptedModel(replies), **kw)


def test_completed():
    r = agent([step("GetTimeTools", {"timezone": "UTC"}), DONE]).run("time?")
    assert r.status == "completed" and r.answer == "42" and r.ok
    assert [s.tool for s in r.steps] == ["GetTimeTools", "TaskCompleteTool"]
    assert r.steps[0].observation["timezone"] == "UTC"
    assert r.stats.model_calls == 2 and r.stats.reasks == 0


def test_max_steps():
    times = [step("GetTimeTools", {"timezone": z}) for z in ("UTC", "Asia/Tokyo", "Europe/Oslo")]
    r = agent(times, max_steps=3).run("loop forever")
    assert r.status == "max_steps" and len(r.steps) == 3
    assert "TaskCompleteTool" in r.error


def test_needs_human_without_callback_then_resume():
    a = agent([step("AskHumanHelpTool", {"question": "Which city?"}), DONE])
    with a.session() as s:
        r = s.run("weather?")
        assert r.status == "needs_human" and r.pending_question == "Which city?"
        r2 = s.run("Oslo")  # the next message answers the pending question
    assert r2.status == "completed"
    last_obs = json.loads(a.model.requests[-1]["messages"][-1]["content"])
    assert last_obs == {"tool_name": "AskHumanHelpTool", "response": "Oslo"}


def test_ask_human_sync_callback():
    asked = []
    a = agent([step("AskHumanHelpTool", {"question": "Name?"}), DONE],
              ask_human=lambda q: asked.append(q) or "Ada")
    r = a.run("greet me")
    assert r.status == "completed" and asked == ["Name?"]
    assert r.steps[0].observation == "Ada"


def test_ask_human_callback_returning_none_means_nobody():
    r = agent([step("AskHumanHelpTool", {"question": "Name?"})], ask_human=lambda q: None).run("x")
    assert r.status == "needs_human" and r.pending_question == "Name?"


def test_ask_human_async_callback_with_arun():
    seen_loop = []

    async def ask(q):
        seen_loop.append(asyncio.get_running_loop())
        return "async answer"

    async def main():
        a = agent([step("AskHumanHelpTool", {"question": "Q?"}), DONE], ask_human=ask)
        result = await a.arun("go")
        return result, asyncio.get_running_loop()

    r, loop = asyncio.run(main())
    assert r.status == "completed" and r.steps[0].observation == "async answer"
    assert seen_loop == [loop]  # answered on the caller's loop


def test_ask_human_async_callback_with_sync_run():
    async def ask(q):
        return "from a coroutine"

    r = agent([step("AskHumanHelpTool", {"question": "Q?"}), DONE], ask_human=ask).run("go")
    assert r.steps[0].observation == "from a coroutine"


def test_failed_after_reask_budget():
    r = agent(["not json", "still not", "nope"]).run("x")
    assert r.status == "failed"
    assert r.stats.invalid_replies == 3 and r.stats.reasks == 2 and r.stats.model_calls == 3
    assert "no valid reply after 3 tries" in r.error


def test_reask_sends_precise_error_and_drops_failed_attempts():
    model = ScriptedModel([step("GetTimeTools", {"timezone": 5}), step("GetTimeTools"), DONE])
    r = Agent(model=model).run("x")
    assert r.status == "completed" and r.stats.reasks == 1 and r.stats.invalid_replies == 1
    reask = model.requests[1]["messages"]
    assert reask[-2] == {"role": "assistant", "content": json.dumps(step("GetTimeTools", {"timezone": 5}))}
    assert "/args_list/timezone: expected string, got integer 5" in reask[-1]["content"]
    third = model.requests[2]["messages"]
    assert not any("rejected" in m["content"] for m in third)  # failed attempt is gone
    assert len(third) == 4  # system, user, assistant step, observation


def test_reask_budget_is_per_step_and_separate_from_max_steps():
    replies = ["bad", step("GetTimeTools"), "bad", "bad", DONE]
    r = agent(replies, max_steps=2).run("x")
    assert r.status == "completed" and r.stats.reasks == 3 and len(r.steps) == 2


def test_tool_that_raises_becomes_an_error_observation():
    @tool
    def flaky(n: int) -> int:
        """Divide."""
        return 1 // n

    model = ScriptedModel([step("flaky", {"n": 0}), step("flaky", {"n": 1}), DONE])
    r = Agent(model=model, tools=[flaky]).run("x")
    assert r.status == "completed"
    assert r.steps[0].error and r.steps[0].observation == {"error": "ZeroDivisionError: integer division or modulo by zero"}
    assert r.steps[1].observation == 1


def test_model_error_fails_the_run():
    r = agent([ModelError("http://x answered 500: boom")]).run("x")
    assert r.status == "failed" and "500" in r.error


def test_interrupted_by_ctrl_c():
    @tool
    def slow() -> str:
        """Gets interrupted."""
        raise KeyboardInterrupt

    r = Agent(model=ScriptedModel([step("slow")]), tools=[slow]).run("x")
    assert r.status == "interrupted"


def test_ctrl_c_between_two_events_ends_the_run_interrupted():
    """A Ctrl-C that lands in the code that hands events on (`drain`, the records' loop), not
    inside the loop, still ends the run cleanly: a chat's turn, not the chat (a CI run)."""
    from jsonagent.bridge import drain
    from jsonagent.events import RunEnd

    def handled(act):  # a Ctrl-C let through would end the test session, not fail a test
        try:
            return act()
        except KeyboardInterrupt:
            pytest.fail("the Ctrl-C went on up")

    events = Agent(model=ScriptedModel([step("GetTimeTools"), DONE])).iter("x")
    next(events)
    end = handled(lambda: events.throw(KeyboardInterrupt()))  # where the caller waited
    assert isinstance(end, RunEnd) and end.result.status == "interrupted"

    running = Agent(model=ScriptedModel([step("GetTimeTools"), DONE])).iter("x")
    assert handled(lambda: drain(_Landing(running, at=2))).status == "interrupted"
    ended = Agent(model=ScriptedModel([DONE])).iter("x")
    for _ in ended:
        pass
    with pytest.raises(KeyboardInterrupt):  # a run that had ended lets it go on up
        drain(_Landing(ended, at=1))


class _Landing:
    """A run's events, where the caller's `at`-th wait for the next one meets a Ctrl-C
    before the run resumes."""

    def __init__(self, run, at: int):
        self.run, self.at, self.calls = run, at, 0

    def __next__(self):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return next(self.run)

    def throw(self, exc):
        return self.run.throw(exc)


def test_arun_cancel_stops_at_the_next_step():
    started = threading.Event()

    def reply(messages, fmt):
        started.set()  # a new format every time: a run that repeats itself would stall
        return step("GetTimeTools", {"format": f"%H:%M {len(messages)}"})

    async def main():
        a = Agent(model=ScriptedModel(reply), max_steps=10_000)
        task = asyncio.create_task(a.arun("x"))
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(main(), 10))


def test_json_mode_steps_down_once_and_stays_down():
    model = ScriptedModel([ResponseFormatRejected("400 for response_format json_schema: nope"),
                           step("GetTimeTools"), DONE])
    r = Agent(model=model, config=AgentConfig(json_mode="schema")).run("x")
    assert r.status == "completed" and r.json_mode == "object"
    formats = [req["response_format"] for req in model.requests]
    assert formats[0]["type"] == "json_schema"
    assert formats[1:] == [{"type": "json_object"}, {"type": "json_object"}]


def test_json_mode_prompt_sends_no_response_format():
    model = ScriptedModel([DONE])
    Agent(model=model, config=AgentConfig(json_mode="prompt")).run("x")
    assert model.requests[0]["response_format"] is None


def test_system_prompt_is_byte_identical_and_dateless():
    model = ScriptedModel([step("GetTimeTools"), step("GetTimeTools"), DONE])
    Agent(model=model).run("x")
    systems = {req["messages"][0]["content"] for req in model.requests}
    assert len(systems) == 1
    from datetime import date

    today = date.today()
    prompt = systems.pop()
    assert today.isoformat() not in prompt and today.strftime("%Y/%m/%d") not in prompt


def test_observation_message_shape_and_role():
    model = ScriptedModel([step("GetTimeTools", {"timezone": "UTC"}), DONE])
    Agent(model=model, config=AgentConfig(observation_role="tool")).run("x")
    obs = model.requests[1]["messages"][-1]
    assert obs["role"] == "tool"
    body = json.loads(obs["content"])
    assert body["tool_name"] == "GetTimeTools" and body["response"]["timezone"] == "UTC"


def test_observations_take_the_models_role_unless_the_config_names_one():
    def observation_role(config: AgentConfig | None) -> str:
        model = ScriptedModel([step("GetTimeTools", {"timezone": "UTC"}), DONE])
        model.observation_role = "tool"  # as a local model whose template has a tool turn
        agent = Agent(model=model, config=config)
        agent.run("x")
        assert agent.last_state.config["observation_role"] == agent.config.observation_role
        return model.requests[1]["messages"][-1]["role"]

    assert observation_role(None) == "tool"
    assert observation_role(AgentConfig(observation_role="user")) == "user"
    model = ScriptedModel([DONE])  # a model that says nothing gets the user turn
    assert Agent(model=model).config.observation_role == "user"


def test_long_observation_is_cut_with_a_note():
    @tool
    def big() -> str:
        """Lots of text."""
        return "x" * 50_000

    model = ScriptedModel([step("big"), DONE])
    Agent(model=model, tools=[big], config=AgentConfig(max_observation_chars=1000)).run("x")
    content = json.loads(model.requests[1]["messages"][-1]["content"])["response"]
    assert len(content) < 1100 and "cut: 49000 more characters" in content


class CityAnswer(BaseModel):
    city: str
    population: int

    @field_validator("population")
    @classmethod
    def positive(cls, v):
        if v <= 0:
            raise ValueError("population must be positive")
        return v


def test_output_type_validates_the_final_answer():
    model = ScriptedModel([
        step("TaskCompleteTool", {"city": "Oslo"}),                      # schema: re-asked
        step("TaskCompleteTool", {"city": "Oslo", "population": -1}),    # validator: observation
        step("TaskCompleteTool", {"city": "Oslo", "population": 700000}),
    ])
    r = Agent(model=model, output_type=CityAnswer).run("x")
    assert r.status == "completed" and r.answer == CityAnswer(city="Oslo", population=700000)
    assert r.stats.reasks == 1
    assert "population must be positive" in r.steps[0].observation["error"]
    schema = model.requests[0]["messages"][0]["content"]
    assert '"population"' in schema


def test_code_interpreter_uses_one_sandbox_per_run_and_closes_it():
    FakeSandbox.closed = False
    r = agent([step("CodeInterpreterTool", {"code": "x=1"}), step("CodeInterpreterTool", {"code": "lose"}),
               DONE]).run("x")
    assert r.steps[0].observation["stdout"] == "ran 3 chars\n"
    assert "restarted" in r.steps[1].observation["note"]  # the model is told state is gone
    assert FakeSandbox.closed


def test_tool_without_implementation_is_refused_up_front():
    from jsonagent import SpecError

    with pytest.raises(SpecError, match=r"no implementation for .*\(lonely\)"):
        Agent(model=ScriptedModel([]), tools=[{"name": "lonely"}])


def test_transcript_has_every_event_and_reads_back(tmp_path):
    path = tmp_path / "run.jsonl"
    r = agent(["oops", step("GetTimeTools"), DONE], transcript=path).run("time?")
    events = read_journal(path)
    kinds = [e.type for e in events]
    assert kinds == ["run_start", "model_reply", "reask", "model_reply", "step", "tool_result",
                     "model_reply", "step", "run_end"]
    assert events[1].raw == "oops"  # invalid replies are kept
    assert events[0].toolset and "GetTimeTools" in events[0].tools
    assert events[-1].status == r.status == "completed" and events[-1].answer == "42"
    assert events[5].duration_s >= 0


def test_transcript_lines_are_the_events_as_emitted(tmp_path):
    path, emitted = tmp_path / "run.jsonl", []
    agent(["oops", step("GetTimeTools"), DONE], transcript=path, on_event=emitted.append).run("time?")
    assert read_journal(path) == emitted  # every field read back into the same class
    end = json.loads(path.read_text().splitlines()[-1])
    assert emitted[-1].result is not None and "result" not in end  # in memory only


def test_transcript_survives_a_crash(tmp_path):
    path = tmp_path / "run.jsonl"

    def explode(messages, fmt):
        if len(messages) > 2:
            raise RuntimeError("backend bug")
        return step("GetTimeTools")

    with pytest.raises(RuntimeError):
        Agent(model=ScriptedModel(explode), transcript=path).run("x")
    kinds = [e.type for e in read_journal(path)]
    assert kinds == ["run_start", "model_reply", "step", "tool_result", "run_end"]
    end = read_journal(path)[-1]
    assert end.status == "failed" and "RuntimeError: backend bug" in end.error


def test_unwritable_transcript_is_refused_before_the_run(tmp_path):
    from jsonagent import ConfigError

    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot write transcript"):
        agent([DONE], transcript=tmp_path / "file" / "t.jsonl").run("x")


def test_usage_is_summed():
    r = agent([step("GetTimeTools"), DONE]).run("x")
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0


def test_a_paused_runs_result_keeps_its_totals_when_the_run_goes_on():
    chat = agent([step("AskHumanHelpTool", {"question": "Which city?"}), DONE]).session()
    paused = chat.run("weather?")
    usage, stats = paused.usage.model_copy(), paused.stats.model_copy()
    done = chat.resume(answer="Oslo")  # the same RunState goes on
    assert (paused.usage, paused.stats) == (usage, stats)  # a result holds copies
    assert done.usage.completion_tokens > usage.completion_tokens
    assert done.stats.model_calls == stats.model_calls + 1


def test_unserialisable_tool_result_is_kept_as_text(tmp_path):
    class Opaque:
        def __repr__(self):
            return "<Opaque>"

    @tool
    def weird() -> object:
        """Returns something JSON cannot hold."""
        return {"thing": Opaque(), "ids": {1, 2}}

    path = tmp_path / "t.jsonl"
    r = Agent(model=ScriptedModel([step("weird"), DONE]), tools=[weird], transcript=path).run("x")
    assert r.status == "completed"
    assert r.steps[0].observation == {"thing": "<Opaque>", "ids": [1, 2]}
    results = [e for e in read_journal(path) if e.type == "tool_result"]
    assert results[0].observation == {"thing": "<Opaque>", "ids": [1, 2]}
    json.loads(r.model_dump_json())


def test_tool_calling_sys_exit_is_an_observation():
    @tool
    def quit_now() -> None:
        """Tries to end the process."""
        raise SystemExit(3)

    r = Agent(model=ScriptedModel([step("quit_now"), DONE]), tools=[quit_now]).run("x")
    assert r.status == "completed" and r.steps[0].observation == {"error": "SystemExit: 3"}


def test_dataclass_output_type():
    from dataclasses import dataclass

    @dataclass
    class Pair:
        left: int
        right: int

    model = ScriptedModel([step("TaskCompleteTool", {"left": 1, "right": 2})])
    r = Agent(model=model, output_type=Pair).run("x")
    assert r.status == "completed" and r.answer == Pair(1, 2)


def test_resume_and_rejected_answers_are_in_the_transcript(tmp_path):
    path = tmp_path / "t.jsonl"
    a = agent([step("AskHumanHelpTool", {"question": "Which city?"}),
               step("TaskCompleteTool", {"city": "Oslo", "population": 0}),
               step("TaskCompleteTool", {"city": "Oslo", "population": 1})],
              transcript=path, output_type=CityAnswer)
    with a.session() as s:
        s.run("weather?")
        s.run("Oslo")
    results = [e for e in read_journal(path) if e.type == "tool_result"]
    assert [(e.step, e.tool, e.observation, e.error) for e in results][0] == (1, "AskHumanHelpTool", "Oslo", False)
    assert results[1].error and "population must be positive" in results[1].observation["error"]


def test_a_final_answer_cut_at_the_token_cap_is_asked_again():
    from jsonagent.models import ModelReply

    head = json.dumps(step("TaskCompleteTool", {"output": "The answer is 4"}))[:-3]
    model = ScriptedModel([ModelReply(text=head, cut=True), DONE])
    result = Agent(model=model, max_steps=3).run("q")
    assert result.status == "completed" and result.answer == "42"
    assert result.stats.reasks == 1
    shown, told = model.requests[1]["messages"][-2:]
    assert shown == {"role": "assistant", "content": head}  # its head, and that it was cut
    assert "cut off at the length limit" in told["content"]


def test_a_final_answer_at_the_token_cap_whose_json_is_whole_is_the_answer():
    from jsonagent.models import ModelReply

    whole = json.dumps(step("TaskCompleteTool", {"output": "4"}))
    result = Agent(model=ScriptedModel([ModelReply(text=whole, cut=True)]), max_steps=3).run("q")
    assert result.status == "completed" and result.answer == "4" and result.stats.reasks == 0
