"""Cancellation as data: a cancel stops the work in flight, for every tool kind, in the library.

The tools are real: a command with a grandchild, a Python function that ignores the token,
a slow local HTTP server, the sandboxed code interpreter and an MCP server over stdio.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import slow_tools
from jsonagent import Agent, CancelToken, Cancelled, RunContext, core_tools, tool
from jsonagent.cancel import on_caller
from jsonagent.notes import note
from jsonagent.testing import ScriptedModel, step

DONE = step("TaskCompleteTool", {"output": "done"})


# -- the token ---------------------------------------------------------------------------------

def test_a_call_returns_its_value_or_raises_its_error():
    token = CancelToken()
    assert token.call(lambda a, b=0: a + b, 2, b=3) == 5
    with pytest.raises(ZeroDivisionError):
        token.call(lambda: 1 / 0)
    token.close()


def test_a_cancel_ends_the_wait_at_once_whatever_the_work_does():
    token = CancelToken()
    threading.Timer(0.2, token.cancel, ["stop now"]).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled, match="stop now"):
        token.call(time.sleep, 30)
    assert time.monotonic() - t0 < 1.5
    with pytest.raises(Cancelled):  # a cancelled token runs nothing more
        token.call(lambda: 1)


def test_stoppers_run_once_on_cancel_and_at_once_when_registered_late():
    token, seen = CancelToken(), []
    remove = token.on_cancel(lambda: seen.append("a"))
    token.on_cancel(lambda: seen.append("b"))
    remove()
    token.cancel()
    token.cancel()
    token.on_cancel(lambda: seen.append("late"))
    assert seen == ["b", "late"] and token.cancelled


def test_asking_the_person_happens_on_the_waiting_thread():
    token, where = CancelToken(), []

    def ask(question):
        where.append(threading.current_thread())
        return question.upper()

    assert token.call(lambda: on_caller(ask, "oslo?")) == "OSLO?"
    assert where == [threading.current_thread()]
    token.close()


# -- every tool kind, through the library ------------------------------------------------------

@pytest.fixture
def slow(tmp_path):
    http = slow_tools.SlowHttp()
    specs = slow_tools.write(tmp_path, http.port)
    yield tmp_path, specs, http
    http.close()


def cancel_during_tool(agent: Agent, question: str = "go"):
    """Run, cancel 0.5 s after the slow tool started; the result and the seconds from the
    cancel to the run's end."""
    marks = {}

    def on_event(event):
        if event.type == "step" and "cancel" not in marks:
            def cancel():
                marks["cancel"] = time.monotonic()
                agent.cancel(event.run_id)
            marks["timer"] = threading.Timer(0.5, cancel)
            marks["timer"].start()

    agent.on_event = on_event
    result = agent.run(question)
    return result, time.monotonic() - marks["cancel"]


def assert_cancelled(result, seconds):
    assert result.status == "interrupted" and result.error == "cancelled"
    assert result.steps[-1].observation == {"error": note("tool_cancelled")}
    assert seconds < 3, seconds


def test_a_command_tool_and_its_grandchild_are_killed(slow):
    tmp, specs, _ = slow
    until = time.time() + 60
    agent = Agent(model=ScriptedModel([step("slow_command", {"until": until}), DONE]),
                  tools=[specs])
    result, seconds = cancel_during_tool(agent)
    assert_cancelled(result, seconds)
    assert slow_tools.gone(slow_tools.command_pids(tmp))


def test_a_python_tool_that_ignores_the_token_is_left_behind(slow):
    _, specs, _ = slow
    agent = Agent(model=ScriptedModel([step("slow_python", {"until": time.time() + 5}), DONE]),
                  tools=[specs])
    assert_cancelled(*cancel_during_tool(agent))


LEFT_BEHIND = """
import threading, time
from jsonagent import Agent
from jsonagent.testing import ScriptedModel, step

started = threading.Event()

def nap(seconds: float) -> str:
    \"\"\"Sleeps, and never looks at the cancel token.\"\"\"
    started.set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.02)
    return "slept"

agent = Agent(ScriptedModel([step("nap", {"seconds": 60})]), tools=[nap])
threading.Thread(target=lambda: started.wait(30) and agent.cancel(), daemon=True).start()
print(agent.run("go").status)
"""


def test_a_script_ends_cleanly_while_its_cancelled_python_tool_still_runs(tmp_path):
    """The tool goes on in a daemon thread, which Python ends as the script exits; ended
    inside pydantic's native frames (where validate_call used to call the function), that
    aborted the process ("Aborted (core dumped)", exit 134) after the run had ended."""
    proc = subprocess.run([sys.executable, "-c", LEFT_BEHIND], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, "interrupted"), proc.stderr[-2000:]


def test_ctrl_c_held_waits_for_the_block_and_a_second_ctrl_c_does_not():
    from jsonagent.ctrlc import ctrl_c_held

    before, done = signal.getsignal(signal.SIGINT), []
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append("the block")
    assert done == ["the block"]
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append("never")  # a block stuck here is left at the second Ctrl-C
    assert done == ["the block"]
    assert signal.getsignal(signal.SIGINT) is before


HELD_AT_THE_DEFAULT_ACTION = """
import os, signal, time
from jsonagent.ctrlc import ctrl_c_held
signal.signal(signal.SIGINT, signal.SIG_DFL)
with ctrl_c_held():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)
    print("the block", flush=True)
print("after it")
"""


def test_ctrl_c_held_keeps_an_ignored_ctrl_c_ignored_and_the_default_action_deadly():
    from jsonagent.ctrlc import ctrl_c_held

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with ctrl_c_held():
            for _ in range(2):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
    finally:
        signal.signal(signal.SIGINT, before)
    proc = subprocess.run([sys.executable, "-c", HELD_AT_THE_DEFAULT_ACTION],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (-signal.SIGINT, "the block\n")


def test_a_run_swaps_the_ctrl_c_handler_once_not_at_every_event(monkeypatch):
    """Swapping it for every held block cost about 15 µs a swap, twelve swaps a step."""
    swaps = []
    real = signal.signal
    monkeypatch.setattr(signal, "signal", lambda *a: (swaps.append(a[0]), real(*a))[1])
    before = signal.getsignal(signal.SIGINT)
    zones = ["UTC", "Asia/Tokyo", "Europe/Oslo", "America/Lima", "Africa/Lagos"]
    script = [step("GetTimeTools", {"timezone": z}) for z in zones] + [DONE]
    assert Agent(model=ScriptedModel(script), tools=[core_tools()], max_steps=6).run("t").ok
    assert swaps == [signal.SIGINT, signal.SIGINT]  # in for the run, and back out
    assert signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_between_two_events_goes_up_as_before_and_the_run_ends_interrupted():
    seen = []

    def on_event(event):
        seen.append(event.type)
        if event.type == "step":  # outside every held block: in the caller's code
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)

    script = [step("GetTimeTools", {"timezone": "UTC"}), DONE]
    result = Agent(model=ScriptedModel(script), tools=[core_tools()], on_event=on_event).run("t")
    assert result.status == "interrupted" and result.error == "interrupted by the user"
    assert seen[-1] == "run_end"


def test_the_helper_thread_serves_the_next_run_unless_a_cancel_left_it_a_call():
    from jsonagent.cancel import _Helper

    @tool
    def where() -> str:
        """The thread it runs in."""
        return threading.current_thread().name + str(threading.get_ident())

    script = [step("where"), DONE]
    could_cancel = threading.Event()  # a thread that could cancel the runs: they hand over
    watcher = threading.Thread(target=could_cancel.wait, daemon=True)
    watcher.start()
    first = Agent(model=ScriptedModel(script), tools=[where]).run("a").steps[0].observation
    second = Agent(model=ScriptedModel(script), tools=[where]).run("b").steps[0].observation
    assert first == second and first.startswith("jsonagent-run-helper")
    token, release = CancelToken(), threading.Event()
    threading.Timer(0.1, token.cancel).start()
    with pytest.raises(Cancelled):
        token.call(release.wait, 10)
    token.close()
    assert all(h is not None for h in _Helper.idle)
    third = Agent(model=ScriptedModel(script), tools=[where]).run("c").steps[0].observation
    release.set()
    could_cancel.set()
    assert third != first  # the abandoned helper was not handed a new run


ALONE = """
import threading, time
from jsonagent import Agent, tool
from jsonagent.testing import ScriptedModel, step

@tool
def where() -> str:
    \"\"\"The thread it runs in.\"\"\"
    return threading.current_thread().name

def run():
    script = [step("where"), step("TaskCompleteTool", {"output": "done"})]
    return Agent(model=ScriptedModel(script), tools=[where]).run("q").steps[0].observation

print(run())  # nothing else could cancel the run: the tool runs in the run's own thread
threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
print(run())  # another thread might: the tool goes to the helper, so a cancel ends the wait
"""


def test_a_python_tool_runs_in_the_runs_thread_unless_another_thread_could_cancel():
    proc = subprocess.run([sys.executable, "-c", ALONE], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.split() == ["MainThread", "jsonagent-run-helper"], proc.stderr


def test_a_helper_left_with_its_call_by_a_caller_gone_is_never_handed_a_new_run():
    """A caller that stops reading a stream, or Ctrl-C while waiting: the helper's call goes
    on, so it must not wait in the pool for the next run (which would queue behind it)."""
    from jsonagent.cancel import _Helper

    for leave in ("stop reading", "ctrl-c"):
        token, release = CancelToken(), threading.Event()

        def work(emit):
            emit("first")
            release.wait(10)

        if leave == "stop reading":
            writing = token.stream(work)
            assert next(writing) == "first"
            writing.close()
        else:
            threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            with pytest.raises(KeyboardInterrupt):
                token.call(release.wait, 10)
        token.close()
        t0 = time.monotonic()
        assert CancelToken().call(lambda: 42) == 42 and time.monotonic() - t0 < 1, leave
        release.set()
        assert len(_Helper.idle) <= _Helper.IDLE_MAX


def test_a_run_closed_from_another_thread_leaves_the_handler_for_its_own():
    from jsonagent import ctrlc

    before = signal.getsignal(signal.SIGINT)
    watched = ctrlc.ctrl_c_watched().__enter__()
    errors = []
    worker = threading.Thread(target=lambda: errors.extend(
        [exc for exc in [_try(watched.__exit__)] if exc]))
    worker.start()
    worker.join()
    assert errors == [] and ctrlc._holder is None  # no ValueError from signal.signal
    ctrlc._Holder(before).install()  # the main thread puts the old handler back itself
    signal.signal(signal.SIGINT, before)


def _try(fn):
    try:
        fn(None, None, None)
    except Exception as exc:
        return exc
    return None


def test_ctrl_c_while_an_event_is_recorded_waits_until_every_record_has_it(tmp_path):
    """Ctrl-C landing while the store writes the step (here: it sends the SIGINT itself, then
    takes a while) used to leave the step out of the store and the transcript, which then
    had the interrupted tool's result without its call."""
    from jsonagent import read_journal
    from jsonagent.store import open_store

    store = open_store(tmp_path / "db.sqlite")
    record = store.record

    def slow_record(event, state):
        if event.type == "step":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # where the KeyboardInterrupt came, before the write
        record(event, state)

    store.record = slow_record
    transcript = tmp_path / "t.jsonl"
    agent = Agent(ScriptedModel([step("GetTimeTools"), DONE]), store=store,
                  transcript=transcript)
    result = agent.run("what time is it?")
    assert result.status == "interrupted" and result.error == "interrupted by the user"
    kept = [e.type for e in read_journal(transcript)]
    assert kept[-3:] == ["step", "tool_result", "run_end"]
    assert [e["type"] for e in store.events(result.run_id)] == kept
    store.close()


def test_a_python_tool_sees_the_token_through_its_context():
    stopped = threading.Event()

    @tool
    def polite(ctx: RunContext) -> str:
        """Works until cancelled."""
        while not ctx.cancelled:
            time.sleep(0.01)
        stopped.set()
        return "stopped"

    agent = Agent(model=ScriptedModel([step("polite"), DONE]), tools=[polite])
    assert_cancelled(*cancel_during_tool(agent))
    assert stopped.wait(2)


def test_an_http_request_is_closed(slow):
    _, specs, http = slow
    agent = Agent(model=ScriptedModel([step("slow_http", {"until": time.time() + 60}), DONE]),
                  tools=[specs])
    assert_cancelled(*cancel_during_tool(agent))
    assert http.hung_up.wait(3)


def test_the_code_interpreter_is_killed_and_the_next_call_says_so():
    code = "import time\nx = 1\ntime.sleep(60)"
    model = ScriptedModel([step("CodeInterpreterTool", {"code": "y = 2"}),
                           step("CodeInterpreterTool", {"code": code}),
                           step("CodeInterpreterTool", {"code": "print(y)"}), DONE])
    marks = {}

    def on_event(event):
        if event.type == "step" and event.step == 2:
            marks["sandbox"] = session.ctx.state["sandbox"]
            threading.Timer(0.5, lambda: (marks.setdefault("t", time.monotonic()),
                                          agent.cancel(event.run_id))).start()

    with Agent(model=model, tools=[core_tools()], on_event=on_event) as agent:
        session = agent.session()
        result = session.run("first")
        assert_cancelled(result, time.monotonic() - marks["t"])
        worker = marks["sandbox"]._session
        assert worker is None or worker.proc is None or slow_tools.gone([worker.proc.pid], 1)
        again = session.run("second")  # the session goes on after a cancel
        session.close()
    assert again.status == "completed"
    observation = again.steps[0].observation
    assert "restarted" in observation["note"] and "NameError" in json.dumps(observation)


def test_an_mcp_call_is_cancelled_and_the_server_stays_up(tmp_path):
    from jsonagent.tools.mcp import MCPServer

    server = MCPServer(slow_tools.mcp_command(tmp_path), call_timeout=120)
    model = ScriptedModel([step("sleep", {"seconds": 60}),
                           step("echo", {"text": "still here"}), DONE])
    with Agent(model=model, tools=[server]) as agent:
        assert_cancelled(*cancel_during_tool(agent))
        assert slow_tools.wait_for(lambda: (tmp_path / "mcp.pid.cancelled").exists(), 3)
        pid = int((tmp_path / "mcp.pid").read_text())
        assert slow_tools.alive(pid)
        again = agent.run("again")
        assert again.status == "completed" and again.steps[0].observation == {"result": "still here"}


def test_a_model_call_in_flight_is_abandoned():
    release = threading.Event()

    def slow_reply(messages, fmt):
        release.wait(30)
        return DONE

    agent = Agent(model=ScriptedModel(slow_reply), tools=[])
    threading.Timer(0.5, agent.cancel).start()
    t0 = time.monotonic()
    result = agent.run("think hard")
    release.set()
    assert result.status == "interrupted" and time.monotonic() - t0 < 3
    assert result.steps == []


def test_an_endpoint_request_in_flight_is_closed(slow):
    from jsonagent.models.openai import OpenAIModel

    _, _, http = slow
    model = OpenAIModel("slow", base_url=f"http://127.0.0.1:{http.port}/v1", api_key="k",
                        max_retries=0)
    agent = Agent(model=model, tools=[])
    threading.Thread(target=lambda: slow_tools.wait_for(lambda: http.requests > 0, 10)
                     and (time.sleep(0.3), agent.cancel())).start()
    t0 = time.monotonic()
    result = agent.run("think hard")
    assert result.status == "interrupted" and time.monotonic() - t0 < 5
    assert http.hung_up.wait(3)  # the endpoint saw the connection close, and can stop
    model.close()


def test_a_cancel_before_the_first_step_stops_the_run_there():
    agent = Agent(model=ScriptedModel([DONE]), tools=[])
    session = agent.session()
    session.cancel()
    result = session.run("never")
    assert result.status == "interrupted" and result.stats.model_calls == 0
    assert session.run("now").status == "completed"  # the next run starts uncancelled


def test_cancel_knows_only_runs_in_progress():
    agent = Agent(model=ScriptedModel([DONE]), tools=[])
    result = agent.run("q")
    assert agent.cancel(result.run_id) is False and agent.cancel() is False


def test_asyncio_wait_for_cancels_the_run_and_leaves_nothing_behind(slow):
    tmp, specs, _ = slow
    agent = Agent(model=ScriptedModel([step("slow_command", {"until": time.time() + 60}),
                                       DONE]), tools=[specs])
    before = set(threading.enumerate())
    t0 = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(agent.arun("go"), 2))
    assert time.monotonic() - t0 < 5
    assert slow_tools.gone(slow_tools.command_pids(tmp), 0)
    assert slow_tools.wait_for(lambda: set(threading.enumerate()) <= before, 2), \
        set(threading.enumerate()) - before


def test_task_cancel_of_arun_ends_it_interrupted(slow):
    tmp, specs, _ = slow
    agent = Agent(model=ScriptedModel([step("slow_command", {"until": time.time() + 60}),
                                       DONE]), tools=[specs])

    async def go():
        task = asyncio.ensure_future(agent.arun("go"))
        while not (tmp / "command.pids").exists():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert slow_tools.gone(slow_tools.command_pids(tmp), 0)
    assert agent.last_state.status == "interrupted"


# -- the CLI's Ctrl-C takes the same path ------------------------------------------------------

def cli_in_a_slow_command(tmp, specs):
    """`jsonagent run` whose one step is the slow command, once that command runs."""
    script = tmp / "script.json"
    script.write_text(json.dumps([step("slow_command", {"until": time.time() + 60}), DONE]))
    proc = subprocess.Popen([sys.executable, "-m", "jsonagent", "run", "go", "--no-store",
                             "--tools", str(specs), "--model", f"scripted:{script}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp, env={**os.environ, "JSONAGENT_HOME": str(tmp / "home")})
    assert slow_tools.wait_for(lambda: (tmp / "command.pids").exists(), 30)
    return proc


def test_ctrl_c_in_the_cli_during_a_command_exits_130_and_leaves_no_process(slow):
    tmp, specs, _ = slow
    proc = cli_in_a_slow_command(tmp, specs)
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        seconds = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert seconds < 3 and "Traceback" not in err
    assert slow_tools.gone(slow_tools.command_pids(tmp), 0)


def test_kill_9_of_the_cli_takes_its_command_along(slow):
    """A killed process cannot clean up: the command must not outlive it (PR_SET_PDEATHSIG)."""
    tmp, specs, _ = slow
    proc = cli_in_a_slow_command(tmp, specs)
    command, grandchild = slow_tools.command_pids(tmp)
    try:
        proc.kill()
        proc.communicate(timeout=10)
        assert slow_tools.gone([command], 3)
    finally:
        if proc.poll() is None:
            proc.kill()
        try:  # what the command itself started is its own: clean up after the test
            os.killpg(os.getpgid(grandchild), signal.SIGKILL)
        except ProcessLookupError:
            pass
