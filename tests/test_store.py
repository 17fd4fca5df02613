"""The `Store` protocol, one suite for both stores: a real SQLite file and a real PostgreSQL
(a throwaway cluster, tests/pg.py), so that the two stay equal.

Two store objects on one database stand for two processes: the second never shares the
first's memory, only what went through the database."""

import json
import threading
import time

import pytest

from jsonagent import Agent, ConfigError
from jsonagent.errors import Conflict
from jsonagent.store import SessionBusy, open_store
from jsonagent.testing import ScriptedModel, step

DONE = step("TaskCompleteTool", {"output": "42"}, "done")
ASK = step("AskHumanHelpTool", {"question": "Which city?"}, "need a city")
TIME = step("GetCurrentTimeTool", {}, "look at the clock")


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def stores(where):
    """Open stores on `where`, closed at the end."""
    opened = []

    def open_one(**options):
        store = open_store(where, **options)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def agent(store, replies):
    return Agent(model=ScriptedModel(replies), store=store)


def test_a_run_is_kept_with_its_events_in_order_and_read_by_another_process(stores):
    first, second = stores(), stores()
    result = agent(first, [TIME, DONE]).run("what time is it?", session="work")
    assert result.status == "completed"
    run = second.load_run(result.run_id)
    assert (run.status, run.session, run.question) == ("completed", "work", "what time is it?")
    events = second.events(run_id=result.run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "run_start" and events[-1]["type"] == "run_end"
    assert second.events(run_id=result.run_id, after=2) == events[2:]
    session = second.find_session("work")
    assert (session.runs, session.last_status, session.last_run) == (1, "completed", result.run_id)
    assert [s.name for s in second.sessions()] == ["work"]
    assert [r.id for r in second.runs(session_id=session.id)] == [result.run_id]
    assert second.runs(status="needs_human") == []
    assert second.last_run(session.id).run_id == result.run_id
    again = agent(second, [DONE]).run("and now?", session="work")
    assert [e["run_id"] for e in first.events(session_id=session.id)][-1] == again.run_id
    assert first.find_session("work").runs == 2


def test_a_paused_run_refuses_a_new_one_and_resumes_in_another_process(stores):
    first, second = stores(), stores()
    paused = agent(first, [ASK, DONE]).run("where?", session="trip")
    assert paused.status == "needs_human"
    with pytest.raises(SessionBusy) as busy:
        agent(second, [DONE]).run("something else", session="trip")
    assert busy.value.waiting == paused.run_id and "--answer" in str(busy.value)
    done = agent(second, [DONE]).resume(paused.run_id, answer="Oslo")
    assert done.status == "completed" and done.run_id == paused.run_id
    seqs = [e["seq"] for e in first.events(run_id=paused.run_id)]
    assert seqs == list(range(1, len(seqs) + 1))  # numbering goes on across the pause


def test_one_active_run_per_session_across_processes(stores):
    first, second = stores(), stores()
    sid = first.open_session("busy")
    assert second.open_session("busy") == sid
    running = first.start_run(sid, lambda last: _state(first, sid, "one"), 1)
    with pytest.raises(SessionBusy):
        second.start_run(sid, lambda last: _state(second, sid, "two"), 0.3)
    with pytest.raises(SessionBusy):
        second.delete_session(sid)
    assert first.end_run(running.run_id, "failed", "gone", ("queued",)) is False


def test_queued_runs_are_claimed_once_each_across_processes(stores):
    first = stores()
    ids = []
    for n in range(12):
        sid = first.open_session(f"s{n}")
        ids.append(first.start_run(sid, lambda last, sid=sid: _state(first, sid, "q"),
                                   0, queued=True).run_id)
    claimers = [stores() for _ in range(3)]
    taken: list[str] = []
    lock = threading.Lock()

    def claim(store):
        while (info := store.next_run()) is not None:
            with lock:
                taken.append(info.id)
            assert info.status == "running" and info.state.run_id == info.id

    threads = [threading.Thread(target=claim, args=(s,)) for s in claimers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(taken) == sorted(ids)  # every run once, none twice
    assert claimers[0].next_run() is None


def test_a_decision_queues_a_waiting_run_once(stores):
    first, second = stores(), stores()
    paused = agent(first, [ASK, DONE]).run("where?", session="trip")
    assert second.decide(paused.run_id, {"answer": "Oslo"}) is True
    assert first.decide(paused.run_id, {"answer": "Bergen"}) is False
    info = first.load_run(paused.run_id)
    assert (info.status, info.decision) == ("queued", {"answer": "Oslo"})


def test_a_cancel_asked_in_one_process_stops_the_run_another_drives(stores):
    driver, asker = stores(), stores()
    sid = driver.open_session("c")
    state = driver.start_run(sid, lambda last: _state(driver, sid, "long"), 1)
    stopped = threading.Event()
    reasons = []
    release = driver.drive(state.run_id, lambda why: (reasons.append(why), stopped.set()))
    start = time.monotonic()
    assert asker.request_cancel(state.run_id, "cancelled") is True
    assert stopped.wait(3), "the driver was not told within 3 s"
    assert reasons == ["cancelled"] and time.monotonic() - start < 3
    release()
    assert asker.request_cancel("run_nope") is False


def test_end_run_closes_an_idle_run_with_a_last_event(stores):
    first, second = stores(), stores()
    paused = agent(first, [ASK, DONE]).run("where?", session="trip")
    assert second.end_run(paused.run_id, "expired", "no answer", ("needs_human",)) is True
    assert second.end_run(paused.run_id, "expired", "no answer", ("needs_human",)) is False
    last = first.events(run_id=paused.run_id)[-1]
    assert (last["type"], last["status"]) == ("run_end", "expired")
    assert first.load_run(paused.run_id).status == "expired"


def test_items_are_shared(stores):
    first, second = stores(), stores()
    first.put_item("a2a_task", "t1", '{"id": "t1"}')
    first.put_item("a2a_task", "t1", '{"id": "t1", "v": 2}')
    first.put_item("a2a_task", "t2", "{}")
    assert json.loads(second.get_item("a2a_task", "t1")) == {"id": "t1", "v": 2}
    assert second.items("a2a_task") == ['{"id": "t1", "v": 2}', "{}"]
    second.delete_item("a2a_task", "t1")
    assert first.get_item("a2a_task", "t1") is None and first.get_item("other", "t2") is None
    # added, not put: the first value stays, and every caller learns it (a call's A2A task)
    assert first.add_item("a2a_key", "r.1.0", "c1/t1") == "c1/t1"
    assert second.add_item("a2a_key", "r.1.0", "c2/t2") == "c1/t1"
    assert second.get_item("a2a_key", "r.1.0") == "c1/t1"


def test_listeners_hear_of_new_events(stores, where):
    first = stores()
    writer = stores() if where.startswith("postgresql") else first  # SQLite: its own writes
    heard = []
    stop = first.listen(heard.append)
    time.sleep(0.3)  # the listener is connected
    result = agent(writer, [DONE]).run("x", session="l")
    deadline = time.monotonic() + 5
    while result.run_id not in heard and time.monotonic() < deadline:
        time.sleep(0.05)
    assert result.run_id in heard
    stop()


def test_queue_news_reaches_idle_claimers(stores, where):
    first = stores()
    writer = stores() if where.startswith("postgresql") else first  # SQLite: its own writes
    told = threading.Event()
    stop = first.on_queued(told.set)
    time.sleep(0.3)  # the listener is connected
    sid = writer.open_session("q")
    paused = agent(writer, [ASK]).run("where?", session="p")
    assert not told.wait(0.5)  # events of a run are not work to claim
    writer.start_run(sid, lambda last: _state(writer, sid, "queued"), 0, queued=True)
    assert told.wait(5)
    told.clear()
    writer.decide(paused.run_id, {"answer": "Oslo"})
    assert told.wait(5)
    stop()


def test_reopening_migrates_nothing_twice(stores):
    first = stores()
    agent(first, [DONE]).run("x", session="m")
    again = stores()
    assert again.find_session("m").runs == 1


# -- PostgreSQL only --------------------------------------------------------------------------

def test_a_bad_url_an_unreachable_server_and_a_wrong_password_say_so_in_one_line(pg_cluster):
    from pg import free_port

    cases = {pg_cluster.url(password="wrong"): "password authentication failed",
             f"postgresql://jsonagent:secret@127.0.0.1:{free_port()}/x": "Connection refused",
             pg_cluster.url("no_such_db"): "does not exist"}
    for url, why in cases.items():
        with pytest.raises(ConfigError) as err:
            open_store(url)
        text = str(err.value)
        assert "\n" not in text and why in text and "127.0.0.1" in text, text
        assert "secret" not in text and "wrong" not in text


def test_a_run_whose_node_stopped_beating_is_taken_over_and_the_old_node_is_fenced(pg_url):
    sid_store = open_store(pg_url, takeover_after=1)
    other = open_store(pg_url, takeover_after=1)
    try:
        sid = sid_store.open_session("t")
        sid_store.start_run(sid, lambda last: _state(sid_store, sid, "q"), 0, queued=True)
        first = sid_store.next_run()
        assert other.next_run() is None  # it beats (its claim set the heartbeat)
        time.sleep(1.5)  # no drive(): nobody beats for it
        taken = other.next_run()
        assert taken is not None and taken.id == first.id and taken.state.status == "interrupted"
        from jsonagent.events import RunResumed

        with pytest.raises(Conflict):
            sid_store.record(RunResumed(run_id=first.id, session_id=sid, seq=1), first.state)
    finally:
        sid_store.close()
        other.close()


def test_a_process_never_takes_over_a_run_it_still_holds(pg_url):
    """bench/chaos.py: after a PostgreSQL outage longer than the takeover window, a node's own
    runs looked stale to its own claim thread too. Taking one gave the run a second worker in
    the same process, which the claim's fence cannot tell from the first (both read the
    process's one token): the first worker's beat revives the run instead, or another
    process takes it over."""
    store, other = open_store(pg_url, takeover_after=1), open_store(pg_url, takeover_after=1)
    try:
        sid = store.open_session("own")
        store.start_run(sid, lambda last: _state(store, sid, "q"), 0, queued=True)
        mine = store.next_run()
        time.sleep(1.5)  # no beat got through
        assert store.next_run() is None
        taken = other.next_run()
        assert taken is not None and taken.id == mine.id
    finally:
        store.close()
        other.close()


def _state(store, sid, question):
    from jsonagent.state import Message, RunState, new_id

    return RunState(run_id=new_id("run"), session_id=sid, question=question,
                    messages=[Message(role="user", content=question)], json_mode="none",
                    model="scripted", toolset="", tools=[], origin={}, config={})


def _cli(*args, env=None, timeout=60):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "jsonagent", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def test_the_cli_keeps_runs_where_store_says_and_resumes_from_there(tmp_path, where):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([ASK, DONE]))
    paused = _cli("run", "weather?", "--session", "cli", "--model", f"scripted:{script}",
                  "--store", where, "--output", "json")
    assert paused.returncode == 4, paused.stderr
    run_id = json.loads(paused.stdout)["run_id"]
    listed = _cli("sessions", "list", "-o", "json", env={"JSONAGENT_STORE": where})
    assert [s["name"] for s in json.loads(listed.stdout)] == ["cli"], listed.stderr
    done = _cli("resume", run_id, "--answer", "Oslo", "--store", where, "--output", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    shown = json.loads(_cli("sessions", "show", "cli", "-o", "json", "--store", where).stdout)
    assert shown["runs"][-1]["status"] == "completed"


def test_the_cli_says_in_one_line_when_the_database_cannot_be_reached(tmp_path):
    from pg import free_port

    url = f"postgresql://jsonagent:hunter2@127.0.0.1:{free_port()}/jsonagent"
    for args in (["sessions", "list", "--store", url],
                 ["serve", "--port", "0", "--store", url],
                 ["batch", tmp_path / "none.jsonl", "--out", tmp_path / "o.jsonl", "--store", url]):
        if args[0] == "batch":
            (tmp_path / "none.jsonl").write_text('{"id": "a", "input": "x"}\n')
        out = _cli(*args)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith("error: cannot use the PostgreSQL store at 127.0.0.1:")
        assert "Connection refused" in out.stderr and "hunter2" not in out.stderr
        assert out.stderr.count("\n") == 1


def test_the_call_log_keeps_the_first_record_of_a_key_and_its_first_result(stores):
    """Issue 41: a key stays with the tool and arguments it was first recorded with, and a
    call ends once; another process reads both."""
    from jsonagent.calls import Call, call_key

    first, second = stores(), stores()
    sid = first.open_session("calls")
    state = first.start_run(sid, lambda last: _state(first, sid, "q"), 0)
    key = call_key(state.run_id, 1)
    recorded = first.call_started(Call(key, state.run_id, 1, 0, "pay", {"amount": 1}, "once",
                                       time.time()), state)
    assert (recorded.tool, recorded.args, recorded.effects, recorded.ended) == (
        "pay", {"amount": 1}, "once", False)
    again = first.call_started(Call(key, state.run_id, 1, 0, "pay", {"amount": 2}, "once",
                                    time.time()), state)
    assert again.args == {"amount": 1}  # the first record wins
    assert second.call(key).ended is False and second.call("nope") is None
    first.call_ended(key, {"paid": 1}, False)
    first.call_ended(key, {"paid": 2}, True)  # only the first end counts
    (logged,) = second.calls(state.run_id)
    assert (logged.ended, logged.result, logged.error) == (True, {"paid": 1}, False)


def test_a_released_run_is_taken_over_at_once_by_another_process(stores):
    """A node that stops lets go of its runs: the next look for work finds them, with no
    heartbeat to wait out (issue 41, item 3)."""
    first, second = stores(takeover_after=30), stores(takeover_after=30)
    sid = first.open_session("rel")
    first.start_run(sid, lambda last: _state(first, sid, "q"), 0, queued=True)
    mine = first.next_run()
    stop = first.drive(mine.id, lambda why: None)
    assert second.next_run() is None  # driven by a live process
    first.release(mine.id)
    stop()
    taken = second.next_run()
    assert taken is not None and taken.id == mine.id and taken.state.status == "interrupted"


def test_a_node_that_lost_its_run_can_never_start_a_call_of_it(pg_url):
    from jsonagent.calls import Call, call_key

    old, new = open_store(pg_url, takeover_after=1), open_store(pg_url, takeover_after=1)
    try:
        sid = old.open_session("fence")
        old.start_run(sid, lambda last: _state(old, sid, "q"), 0, queued=True)
        mine = old.next_run()
        old.release(mine.id)
        taken = new.next_run()
        assert taken.id == mine.id
        key = call_key(mine.id, 1)
        with pytest.raises(Conflict):
            old.call_started(Call(key, mine.id, 1, 0, "pay", {}, "once", time.time()),
                             mine.state)
        assert new.call(key) is None  # nothing was recorded, nothing ran
    finally:
        old.close()
        new.close()
