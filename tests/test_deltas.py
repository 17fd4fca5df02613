"""Live deltas through the library: `iter(deltas=True)`, `aiter`, `on_event`; never stored."""

import asyncio
import json
import threading
import time

from jsonagent import Agent, read_journal
from jsonagent import events as ev
from jsonagent.testing import ScriptedModel, step

THOUGHT = 'It is "time" — 東京 🙂\nthen done'
CALL = step("GetTimeTools", {"timezone": "Asia/Tokyo"}, THOUGHT)
DONE = step("TaskCompleteTool", {"output": "42"}, "done")


def _agent(replies, **kw):
    return Agent(model=ScriptedModel(replies, chunk=3), **kw)


def test_iter_with_deltas_yields_them_before_the_step():
    events = list(_agent([CALL, DONE]).iter("time?", deltas=True))
    kinds = [type(e).__name__ for e in events]
    first_step = kinds.index("StepTaken")
    thought = "".join(e.text for e in events[:first_step]
                      if isinstance(e, ev.ThoughtDelta) and e.step == 1)
    assert thought == THOUGHT
    assert [e.name for e in events if isinstance(e, ev.ToolNameKnown)] == \
        ["GetTimeTools", "TaskCompleteTool"]
    args = "".join(e.text for e in events[:first_step] if isinstance(e, ev.ArgsDelta))
    assert json.loads(args) == {"timezone": "Asia/Tokyo"}
    # the deltas of a reply come before its model_reply event, and take no number
    assert kinds.index("ThoughtDelta") < kinds.index("ModelCall")
    deltas = [e for e in events if isinstance(e, ev.Delta)]
    assert all(e.run_id == events[0].run_id and e.session_id == events[0].session_id
               for e in deltas)
    seqs = [e.seq for e in events if not isinstance(e, ev.Delta)]
    assert seqs == list(range(1, len(seqs) + 1))


def test_no_deltas_unless_asked(tmp_path):
    model = ScriptedModel([CALL, DONE])
    calls = []
    real = model.complete
    model.complete = lambda *a, **kw: (calls.append(kw.get("on_delta")), real(*a, **kw))[1]
    seen = []
    r = Agent(model=model, on_event=seen.append).run("time?")
    assert r.ok and calls == [None, None]  # the model is called as before
    assert not any(isinstance(e, ev.Delta) for e in seen)


def test_deltas_are_never_stored_nor_written(tmp_path):
    path = tmp_path / "run.jsonl"
    seen = []
    agent = _agent([CALL, DONE], transcript=path, on_event=seen.append, deltas=True,
                   store=tmp_path / "db.sqlite")
    r = agent.run("time?", session="s")
    assert r.ok
    assert any(isinstance(e, ev.ThoughtDelta) for e in seen)  # on_event gets them
    written = [json.loads(line)["type"] for line in path.read_text().splitlines()]
    assert not {"thought_delta", "tool_name", "args_delta"} & set(written)
    stored = agent.store.events(r.run_id)
    assert [e["seq"] for e in stored] == list(range(1, len(stored) + 1))
    assert {e["type"] for e in stored} == set(written)
    assert len(read_journal(path)) == len(written)
    agent.close()


def test_a_reask_follows_the_deltas_of_a_refused_reply():
    bad = '{"thought": "half a thought", "tool_name": "NoSuchTool", "args_list": {}}'
    events = list(_agent([bad, DONE]).iter("x", deltas=True))
    shown = [(e.attempt, e.text) for e in events if isinstance(e, ev.ThoughtDelta)]
    assert "".join(t for a, t in shown if a == 0) == "half a thought"
    assert "".join(t for a, t in shown if a == 1) == "done"
    kinds = [e.type for e in events]
    # the refused attempt's deltas are followed by its reask, then the new attempt's
    assert kinds.index("reask") < kinds.index("step")
    last_refused = max(i for i, e in enumerate(events)
                       if isinstance(e, ev.ThoughtDelta) and e.attempt == 0)
    assert last_refused < kinds.index("reask")


def test_a_repaired_reply_says_so_in_its_step():
    repaired = '{"thoughts": "alias key", "tool_name": "TaskCompleteTool", "args_list": {"output": "x"}}'
    events = list(_agent([repaired]).iter("x", deltas=True))
    end = events[-1]
    assert end.status == "completed"
    taken = next(e for e in events if isinstance(e, ev.StepTaken))
    assert taken.repairs  # the display replaces what it showed with taken.thought
    assert taken.thought == "alias key"


def test_aiter_yields_deltas_while_the_reply_is_written():
    agent = Agent(model=ScriptedModel([DONE | {"thought": "a slow thought to write"}],
                                      chunk=2, delay=0.05))

    async def main():
        got, t0, first = [], time.monotonic(), None
        async for e in agent.aiter("x", deltas=True):
            if isinstance(e, ev.ThoughtDelta) and first is None:
                first = time.monotonic() - t0
            got.append(e)
        return got, first

    got, first = asyncio.run(main())
    assert got[-1].status == "completed"
    written = "".join(e.text for e in got if isinstance(e, ev.ThoughtDelta))
    assert written == "a slow thought to write"
    step_at = next(i for i, e in enumerate(got) if isinstance(e, ev.StepTaken))
    assert sum(isinstance(e, ev.ThoughtDelta) for e in got[:step_at]) > 3


def test_cancel_while_the_reply_is_written():
    agent = Agent(model=ScriptedModel([DONE | {"thought": "x" * 400}], chunk=1, delay=0.05))
    events = agent.iter("x", deltas=True)
    for e in events:
        if isinstance(e, ev.ThoughtDelta):
            threading.Timer(0.1, agent.cancel).start()
            break
    t0 = time.monotonic()
    rest = list(events)
    assert rest[-1].status == "interrupted"
    assert time.monotonic() - t0 < 2


def test_a_model_that_does_not_stream_gets_no_on_delta():
    class Plain:
        name = "plain"

        def complete(self, messages, response_format, *, stop=None):
            return ScriptedModel([DONE]).complete(messages, response_format)

    events = list(Agent(model=Plain()).iter("x", deltas=True))
    assert events[-1].status == "completed"
    assert not any(isinstance(e, ev.Delta) for e in events)


def test_react_style_streams_its_thought():
    from jsonagent import AgentConfig

    reply = "Thought: the answer is known\nAction: TaskCompleteTool\nAction Input: {\"output\": \"4\"}"
    agent = Agent(model=ScriptedModel([reply], chunk=2), config=AgentConfig(prompt_style="react"))
    events = list(agent.iter("2+2?", deltas=True))
    assert events[-1].status == "completed"
    written = "".join(e.text for e in events if isinstance(e, ev.ThoughtDelta))
    assert written == "the answer is known" == next(
        e for e in events if isinstance(e, ev.StepTaken)).thought


def _display():
    import io

    from rich.console import Console

    from jsonagent.cli.display import Display

    display = Display()
    display.live = True  # as on a terminal, without the spinner
    display._start = lambda *a, **kw: None
    display.err = Console(file=io.StringIO(), force_terminal=False, width=200, highlight=False)
    return display


def _shown(display, events) -> str:
    for e in events:
        display.event(e)
    return display.err.file.getvalue()


def test_display_writes_the_thought_then_the_call_on_its_line():
    events = list(_agent([CALL | {"thought": "plain"}, DONE]).iter("x", deltas=True))
    out = _shown(_display(), events)
    assert out.count("plain") == 1
    assert "step 1 plain (model " in out and "\n  → GetTimeTools" in out


def test_display_shows_a_reasked_and_a_repaired_step_again():
    bad = '{"thought": "half a thought", "tool_name": "NoSuchTool", "args_list": {}}'
    repaired = '{"thoughts": "alias key", "tool_name": "TaskCompleteTool", "args_list": {"output": "x"}}'
    events = list(_agent([bad, repaired]).iter("x", deltas=True))
    out = _shown(_display(), events)
    # the refused attempt ends its line before the re-ask's warning
    assert "step 1 half a thought\n  ! invalid reply (tool)" in out
    # the repaired reply's thought was not streamed under "thought": the step shows it whole
    assert "step 1 alias key (model" in out
