"""Batch runs: the task file, the results file, resume after kill -9, crashes, timeouts, Ray.

The local pool and Ray run real worker processes; agents come from module-level factories
here, which the workers import by name (spawned workers get this directory on sys.path,
Ray workers through PYTHONPATH).
"""

import functools
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from jsonagent import Agent
from jsonagent.batch import BatchError, read_results, read_tasks, run_batch
from jsonagent.testing import ScriptedModel, step
from slow_tools import ctrl_c_once_written, payer, ray_left_behind

HERE = Path(__file__).resolve().parent
DONE = step("TaskCompleteTool", {"output": "the answer is 4"}, "done")


# -- agents the workers build ------------------------------------------------------------------

def crash_exit() -> str:
    """Leave the process at once, as a native crash would."""
    os._exit(3)


def crash_segfault() -> str:
    """Read address 0."""
    import ctypes

    return ctypes.string_at(0)


def nap(seconds: float) -> str:
    """Sleep a while."""
    time.sleep(seconds)
    return "rested"


def make_agent(crashy: bool = True) -> Agent:
    """The question picks the script: 'exit' and 'segv' crash the worker, 'sleep N' naps."""
    def reply(messages, response_format):
        question = next(m["content"] for m in messages if m["role"] == "user")
        if any("rested" in str(m.get("content")) for m in messages[1:]):
            return DONE
        if crashy and "exit" in question:
            return step("crash_exit")
        if crashy and "segv" in question:
            return step("crash_segfault")
        if question.startswith("sleep"):
            return step("nap", {"seconds": float(question.split()[1])})
        return DONE

    return Agent(model=ScriptedModel(reply), tools=[crash_exit, crash_segfault, nap])


def killed_paying_agent(ledger: str, store: str | None = None) -> Agent:
    """Its `once` tool writes its key to `ledger`, as a payment API would, then its worker
    is killed (kill -9) before the call ends."""
    from jsonagent import tool

    @tool(effects="once")
    def pay(amount: int) -> str:
        """Pays."""
        from jsonagent.calls import current_key

        with open(ledger, "a") as f:
            f.write(current_key() + "\n")
        os.kill(os.getpid(), signal.SIGKILL)
        return "paid"

    return Agent(model=ScriptedModel([step("pay", {"amount": 3}), DONE]), tools=[pay],
                 store=store)


def session_agent() -> Agent:
    """Answers with the number of user turns it can see, to show a session's memory."""
    def reply(messages, response_format):
        turns = sum(1 for m in messages if m["role"] == "user")
        return step("TaskCompleteTool", {"output": str(turns)})

    return Agent(model=ScriptedModel(reply), tools=None)


# -- helpers -----------------------------------------------------------------------------------

def write_tasks(path, tasks):
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return path


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "jsonagent", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def scripted_nap(tmp_path, seconds):
    """A scripted:FILE model and a tool spec whose handler naps: each task takes `seconds`."""
    (tmp_path / "napper.py").write_text(
        "import time\n\ndef nap(seconds):\n    time.sleep(seconds)\n    return 'rested'\n")
    spec = tmp_path / "nap.json"
    spec.write_text(json.dumps([{"name": "Nap", "description": "Sleep.", "handler": "napper:nap",
                                 "parameters": {"type": "object", "properties": {
                                     "seconds": {"type": "number"}}}}]))
    script = tmp_path / "script.json"
    script.write_text(json.dumps([json.dumps(step("Nap", {"seconds": seconds})),
                                  json.dumps(DONE)]))
    return ["--model", f"scripted:{script}", "--tools", spec]


def ids_of(path):
    return [r["id"] for r in read_results(path)]


def assert_no_children():
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not multiprocessing.active_children()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


# -- the task file -----------------------------------------------------------------------------

@pytest.mark.parametrize("content, message", [
    ('{"id": "a", "input": "x"}\n{"id": "b", "input": \n', "tasks.jsonl:2: not valid JSON"),
    ('{"id": "a", "input": "x"}\n\n{"input": "y"}\n', 'tasks.jsonl:3: "id" is missing'),
    ('{"id": "a"}\n', 'tasks.jsonl:1: "input" is missing'),
    ('{"id": 7, "input": "x"}\n', 'tasks.jsonl:1: "id" is not a non-empty string'),
    ('["a", "x"]\n', "tasks.jsonl:1: a task is a JSON object"),
    ('{"id": "a", "input": "x"}\n{"id": "b", "input": "y"}\n{"id": "a", "input": "z"}\n',
     "tasks.jsonl:3: duplicate id 'a' (first on line 1)"),
    ("\n\n", "tasks.jsonl: no tasks"),
])
def test_bad_task_file_is_one_line_error_and_nothing_runs(tmp_path, content, message):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(content)
    out = tmp_path / "out.jsonl"
    proc = cli("batch", tasks, "--out", out, "--model", "scripted:/nonexistent.json")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {tasks.parent}/{message}")
    assert not out.exists()


@pytest.mark.parametrize("command", ["batch", "eval"])
def test_a_device_as_the_results_file_is_one_line_error(tmp_path, command):
    """--out /dev/full was read as the results to go on from, zeros without end, until the
    process was killed; a write that fails (a full disk) is one line too."""
    if command == "batch":
        given = write_tasks(tmp_path / "t.jsonl", [{"id": "a", "input": "x"}])
        flag = "--out"
    else:
        given = tmp_path / "cases.yaml"
        given.write_text("cases:\n  - {input: a}\n")
        flag = "--output"
    script = tmp_path / "s.json"
    script.write_text(json.dumps([json.dumps(step("TaskCompleteTool", {"output": "a"}))]))
    proc = cli(command, given, flag, "/dev/full", "--model", f"scripted:{script}")
    assert proc.returncode == 2
    assert proc.stderr == ("error: /dev/full: cannot read results: not a regular file (a "
                           "device, a pipe or a socket)\n")


def test_a_results_write_that_fails_is_one_line():
    from jsonagent.batch import ResultsFile, TaskResult

    results = ResultsFile(Path("/dev/full"))  # every write: no space left on the device
    with pytest.raises(BatchError, match=r"^cannot write results /dev/full: No space left "
                                         r"on device$"):
        results.write(TaskResult(id="a", status="completed"))
    results.close()


def test_unreadable_task_file_and_foreign_results_file(tmp_path):
    proc = cli("batch", tmp_path / "nope.jsonl", "--out", tmp_path / "o.jsonl", "-m", "x")
    assert proc.returncode == 2 and "cannot read" in proc.stderr and "Traceback" not in proc.stderr
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": "a", "input": "x"}])
    other = tmp_path / "other.jsonl"
    other.write_text('{"not": "results"}\n')
    with pytest.raises(BatchError, match=r"other.jsonl:1: not a results line"):
        run_batch(tasks, other, make_agent)


def test_read_tasks_keeps_optional_fields(tmp_path):
    path = write_tasks(tmp_path / "t.jsonl", [{"id": "a", "input": "x", "expect": "4",
                                               "session": "s", "extra": {"k": 1}, "note": 1}])
    [task] = read_tasks(path)
    assert (task.id, task.input, task.expect, task.session) == ("a", "x", "4", "s")
    assert task.extra == {"k": 1}  # rides to the task's result line; "note" is ignored


# -- the local pool ----------------------------------------------------------------------------

def test_cli_batch_writes_one_line_per_task_with_transcripts(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl",
                        [{"id": f"t{i}", "input": f"q {i}", "expect": "4" if i % 2 else "5"}
                         for i in range(6)] + [{"id": "odd/id", "input": "q"}])
    script = tmp_path / "s.json"
    script.write_text(json.dumps([json.dumps(step("GetTimeTools", {"timezone": "UTC"})),
                                  json.dumps(DONE)]))
    out = tmp_path / "out.jsonl"
    proc = cli("batch", tasks, "--out", out, "--model", f"scripted:{script}", "--workers", "2",
               "--transcripts", tmp_path / "tr")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress bar when stderr is not a terminal
    assert "completed" in proc.stdout and "ok rate" in proc.stdout and "50%" in proc.stdout
    lines = read_results(out)
    assert sorted(r["id"] for r in lines) == sorted(["odd/id"] + [f"t{i}" for i in range(6)])
    first = next(r for r in lines if r["id"] == "t1")
    assert first["status"] == "completed" and first["answer"] == "the answer is 4"
    assert first["steps"] == 2 and first["usage"]["prompt_tokens"] > 0
    assert first["ok"] is True and first["error"] is None
    assert first["seconds"] >= 0 and first["worker"].split(":")[-1].isdigit()
    assert next(r for r in lines if r["id"] == "t0")["ok"] is False
    assert "ok" not in next(r for r in lines if r["id"] == "odd/id")
    files = sorted(p.name for p in (tmp_path / "tr").iterdir())
    assert len(files) == 7 and "t3.jsonl" in files
    from jsonagent import read_journal

    events = read_journal(tmp_path / "tr" / "t3.jsonl")  # every task replays the script
    assert [e.type for e in events][0] == "run_start" and events[-1].status == "completed"
    assert events[0].question == "q 3"


def test_kill_9_in_the_middle_then_resume_gives_every_id_once(tmp_path):
    n = 100
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": f"task-{i:03}", "input": f"question {i}"}
                                               for i in range(n)])
    out = tmp_path / "out.jsonl"
    args = ["batch", tasks, "--out", out, "--workers", "2", *scripted_nap(tmp_path, 0.05)]
    proc = subprocess.Popen([sys.executable, "-m", "jsonagent", *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists()
                                               or out.read_text().count("\n") < 20):
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)  # the batch process only, as `kill -9 PID` would
        proc.wait(10)
        done_before = ids_of(out)
        assert 20 <= len(done_before) < n
        workers = {int(r["worker"].rsplit(":", 1)[1]) for r in read_results(out)}
        deadline = time.monotonic() + 10  # orphaned workers notice and leave
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in workers)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    with out.open("a") as f:  # what a kill in the middle of a write leaves behind
        f.write('{"id": "task-099", "status": "compl')
    again = cli("batch", *args[1:])
    assert again.returncode == 0, again.stderr
    assert f"{n - len(done_before)} run now" in again.stdout
    ids = ids_of(out)
    assert len(ids) == len(set(ids)) == n
    assert ids[:len(done_before)] == done_before
    assert all(r["status"] == "completed" for r in read_results(out))
    assert out.read_text().endswith("}\n")
    rerun = cli("batch", *args[1:])  # everything is done: nothing runs, same answer
    assert rerun.returncode == 0 and "0 run now" in rerun.stdout and len(ids_of(out)) == n


def test_ctrl_c_stops_the_batch_and_its_workers_and_resume_finishes(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": f"t{i}", "input": "q"} for i in range(40)])
    out = tmp_path / "out.jsonl"
    args = ["batch", tasks, "--out", out, "--workers", "2", *scripted_nap(tmp_path, 0.1)]
    proc = ctrl_c_once_written(args, out, 5)
    stderr = proc.stderr
    assert proc.returncode == 130
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted; the finished tasks")
    assert "Traceback" not in stderr
    workers = {int(r["worker"].rsplit(":", 1)[1]) for r in read_results(out)}
    assert workers and not any(alive(pid) for pid in workers)
    assert 5 <= len(ids_of(out)) < 40
    again = cli("batch", *args[1:])
    assert again.returncode == 0, again.stderr
    ids = ids_of(out)
    assert sorted(ids) == sorted(f"t{i}" for i in range(40)) and len(ids) == 40


def test_worker_crashes_are_failed_results_and_the_batch_goes_on(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [
        {"id": "a", "input": "fine"}, {"id": "b", "input": "please exit"},
        {"id": "c", "input": "fine", "expect": "4"}, {"id": "d", "input": "segv now"},
        {"id": "e", "input": "fine"}, {"id": "f", "input": "fine", "expect": "4"}])
    out = tmp_path / "out.jsonl"
    seen = []
    summary = run_batch(tasks, out, make_agent, workers=2, on_result=seen.append)
    by_id = {r["id"]: r for r in read_results(out)}
    assert sorted(by_id) == list("abcdef") and len(seen) == 6
    assert by_id["b"]["status"] == "failed" and by_id["b"]["error"] == "worker crashed (exit code 3)"
    assert by_id["d"]["status"] == "failed" and "SIGSEGV" in by_id["d"]["error"]
    assert all(by_id[i]["status"] == "completed" for i in "acef")
    assert summary.counts == {"completed": 4, "failed": 2} and not summary.all_completed
    assert summary.ok_rate == 1.0
    assert_no_children()

    # --retry-failed runs b and d again (here with an agent that no longer crashes)
    summary = run_batch(tasks, out, functools.partial(make_agent, crashy=False),
                        retry_failed=True)
    assert summary.ran == 2 and summary.all_completed
    ids = ids_of(out)
    assert sorted(ids) == list("abcdef") and ids[-2:] in (["b", "d"], ["d", "b"])
    assert not list(tmp_path.glob(".out.jsonl*"))  # the atomic rewrite left nothing aside


def test_task_timeout_fails_the_task_and_not_the_batch(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": "slow", "input": "sleep 60"},
                                               {"id": "quick", "input": "sleep 0.01"},
                                               {"id": "plain", "input": "hello"}])
    out = tmp_path / "out.jsonl"
    t0 = time.monotonic()
    summary = run_batch(tasks, out, make_agent, workers=2, task_timeout=1)
    assert time.monotonic() - t0 < 30
    by_id = {r["id"]: r for r in read_results(out)}
    assert by_id["slow"]["status"] == "failed"
    assert by_id["slow"]["error"] == "timed out after 1 s" and by_id["slow"]["seconds"] >= 1
    assert by_id["quick"]["status"] == by_id["plain"]["status"] == "completed"
    assert summary.counts == {"completed": 2, "failed": 1}
    assert_no_children()


def test_cli_exit_code_is_1_when_a_task_failed(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": "a", "input": "x"}])
    script = tmp_path / "s.json"
    script.write_text("[]")  # the model has nothing to say: the task fails
    proc = cli("batch", tasks, "--out", tmp_path / "o.jsonl", "-m", f"scripted:{script}")
    assert proc.returncode == 1, proc.stderr
    [line] = read_results(tmp_path / "o.jsonl")
    assert line["status"] == "failed" and "ran out of replies" in line["error"]
    again = cli("batch", tasks, "--out", tmp_path / "o.jsonl", "-m", f"scripted:{script}")
    assert again.returncode == 1 and "0 run now" in again.stdout  # a failure is not re-run...
    script.write_text(json.dumps([json.dumps(DONE)]))
    retry = cli("batch", tasks, "--out", tmp_path / "o.jsonl", "-m", f"scripted:{script}",
                "--retry-failed")  # ...unless asked
    assert retry.returncode == 0, retry.stderr
    [line] = read_results(tmp_path / "o.jsonl")
    assert line["status"] == "completed"


def test_retry_failed_leaves_a_task_whose_once_call_went_through_unless_forced(tmp_path):
    """The model fails after a payment went through (issue 58, finding 4): run again, the
    payment would go under a new key, which the payment API's idempotency check cannot
    catch. --retry-failed leaves that task; --force runs it, saying what it repeats."""
    ledger, spec = payer(tmp_path)
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": "bill", "input": "pay 3"}])
    script, out = tmp_path / "s.json", tmp_path / "o.jsonl"
    pay = json.dumps(step("pay", {"amount": 3}, "pay"))
    script.write_text(json.dumps([pay]))  # then no reply: the model fails after paying
    args = ["batch", tasks, "--out", out, "-m", f"scripted:{script}", "--tools", spec]
    first = cli(*args)
    [line] = read_results(out)
    key = f"{line['run_id']}.1.0"
    assert line["status"] == "failed", first.stderr
    assert line["extra"]["once"] == [{"key": key, "tool": "pay", "ended": "returned"}]
    assert ledger.read_text().split() == [key]
    script.write_text(json.dumps([pay, json.dumps(DONE)]))  # the model is back
    again = cli(*args, "--retry-failed")
    assert again.returncode == 1 and "0 run now" in again.stdout, again.stderr
    assert f"bill is not run again: before its error it called pay (key {key}, " \
           "returned)" in again.stderr and "--force" in again.stderr
    assert ledger.read_text().split() == [key]  # paid once
    forced = cli(*args, "--retry-failed", "--force")
    assert forced.returncode == 0 and "1 run now" in forced.stdout, forced.stderr
    assert f"--force: bill runs again, and with it pay (key {key}, returned) again" \
        in forced.stderr
    paid = ledger.read_text().split()
    assert len(paid) == 2 and paid[0] == key and line["run_id"] not in paid[1]
    assert cli(*args, "--force").returncode == 2


@pytest.mark.parametrize("stored", [True, False], ids=["with-a-store", "without"])
def test_a_worker_killed_in_a_once_call_is_not_run_again_by_retry_failed(tmp_path, stored):
    """kill -9 while paying (issue 58, finding 4, from review): the worker leaves no line,
    so its parent's names the run and what it began, from the store's call log, or, with
    no store to read, an unknown `once` call; --retry-failed does not pay a second time."""
    ledger = tmp_path / "ledger.txt"
    where = str(tmp_path / "runs.db") if stored else None
    factory = functools.partial(killed_paying_agent, str(ledger), where)
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": "bill", "input": "pay 3"}])
    out = tmp_path / "o.jsonl"
    run_batch(tasks, out, factory)
    [line] = read_results(out)
    assert line["status"] == "failed" and "SIGKILL" in line["error"]
    if stored:
        [key] = ledger.read_text().split()
        assert line["run_id"] and key.startswith(line["run_id"])
        assert line["extra"]["once"] == [{"key": key, "tool": "pay", "ended": None}]
    else:
        assert line["extra"]["once"] == [{"key": None, "tool": "?", "ended": None}]
    again = run_batch(tasks, out, factory, retry_failed=True)
    assert again.ran == 0 and len(ledger.read_text().split()) == 1  # paid once
    assert_no_children()


def test_retry_failed_says_why_it_leaves_a_task_whose_worker_died_unread(capsys):
    """With no store to read, the line's `once` call is unknown: said so, not as 'key None'."""
    from jsonagent.batch.dispatch import UNKNOWN_ONCE
    from jsonagent.cli.batch import say_repeats

    say_repeats("--retry-failed", True, False, {"bill": [UNKNOWN_ONCE]})
    said = capsys.readouterr().err
    assert "bill is not run again: before its error it called a once tool perhaps (its " \
           "worker died where the run's calls cannot be read)" in said and "None" not in said


def test_a_broken_agent_factory_is_one_error_before_any_task(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": "a", "input": "x"}])
    proc = cli("batch", tasks, "--out", tmp_path / "o.jsonl", "-m", "scripted:/nope.json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: /nope.json: cannot read script")
    assert read_results(tmp_path / "o.jsonl") == []


def test_tasks_of_one_session_share_its_history(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": "one", "input": "hi", "session": "s"},
                                               {"id": "two", "input": "again", "session": "s"},
                                               {"id": "lone", "input": "hi"}])
    out = tmp_path / "out.jsonl"
    summary = run_batch(tasks, out, session_agent, workers=1)
    by_id = {r["id"]: r for r in read_results(out)}
    assert summary.all_completed
    assert (by_id["one"]["answer"], by_id["two"]["answer"], by_id["lone"]["answer"]) == \
        ("1", "2", "1")
    assert by_id["one"]["session_id"] == by_id["two"]["session_id"] != None  # noqa: E711
    assert by_id["one"]["run_id"] != by_id["two"]["run_id"]


# -- Ray ---------------------------------------------------------------------------------------

# A script's own process starts Ray (run_batch does it when no Ray is up) and ends after it:
# the tests' process never hosts Ray, whose gRPC threads outlive ray.shutdown() there.
RAY_DRIVER = """
import json, sys
from pathlib import Path
from jsonagent.batch import read_tasks, run_batch
from test_batch import make_agent

tasks, out, transcripts = map(Path, sys.argv[1:4])
summary = run_batch(read_tasks(tasks), out, make_agent, backend="ray", workers=2,
                    task_timeout=5, transcripts=transcripts)
print(json.dumps(summary.counts))
"""


def test_ray_backend_runs_the_same_tasks_and_survives_a_crash(tmp_path):
    pytest.importorskip("ray")
    tasks = write_tasks(tmp_path / "t.jsonl",
                        [{"id": f"r{i}", "input": f"question {i}", "expect": "4"}
                         for i in range(12)] + [{"id": "boom", "input": "please exit"},
                                                {"id": "slow", "input": "sleep 60"}])
    out = tmp_path / "out.jsonl"
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    # Ray's workers inherit the driver's environment: this directory, to import make_agent
    env = {**os.environ, "RAY_TMPDIR": temp,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run([sys.executable, "-c", RAY_DRIVER, str(tasks), str(out),
                               str(tmp_path / "tr")],
                              capture_output=True, text=True, timeout=240, env=env)
        left = ray_left_behind(temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not left, f"Ray processes left behind: {left}"
    by_id = {r["id"]: r for r in read_results(out)}
    assert len(by_id) == 14 and len(ids_of(out)) == 14
    assert all(by_id[f"r{i}"]["status"] == "completed" and by_id[f"r{i}"]["ok"]
               for i in range(12))
    assert by_id["boom"]["status"] == "failed" and "worker crashed" in by_id["boom"]["error"]
    assert by_id["slow"]["error"] == "timed out after 5 s"
    assert by_id["r0"]["worker"].startswith("ray:")
    assert json.loads(proc.stdout.splitlines()[-1]) == {"completed": 12, "failed": 2}
    assert len(list((tmp_path / "tr").iterdir())) == 14
    # agents are built once per worker process and reused
    assert len({by_id[f"r{i}"]["worker"] for i in range(12)}) <= 4


def test_an_unreachable_ray_address_is_a_prompt_error(tmp_path):
    pytest.importorskip("ray")
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": "a", "input": "x"}])
    t0 = time.monotonic()
    proc = cli("batch", tasks, "--out", tmp_path / "o.jsonl", "-m", "scripted:/x.json",
               "--backend", "ray", "--ray-address", "127.0.0.1:1", timeout=60)
    assert proc.returncode == 2 and time.monotonic() - t0 < 30
    assert proc.stderr.startswith("error: cannot reach Ray at 127.0.0.1:1")


def test_progress_bar_on_a_terminal(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    tasks = write_tasks(tmp_path / "t.jsonl", [{"id": f"t{i}", "input": "q"} for i in range(20)])
    args = ["batch", tasks, "--out", tmp_path / "o.jsonl", *scripted_nap(tmp_path, 0.05)]
    child = pexpect.spawn(sys.executable, ["-m", "jsonagent", *map(str, args)], encoding="utf-8",
                          timeout=60, env={**os.environ, "COLUMNS": "120"})
    try:
        gap = r"(?:\x1b\[[0-9;]*m|\s)+"  # spaces and colours
        child.expect(rf"20/20{gap}0 failed{gap}[\d.]+/s")  # done, failed, rate; then ETA
        child.expect("ETA")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert len(ids_of(tmp_path / "o.jsonl")) == 20


def test_ray_batch_records_every_run_in_a_shared_postgresql_store(tmp_path, pg_url):
    """A Ray worker on another machine would write where the URL says, not to a local file:
    the driver reads every task's run and session back from the database."""
    pytest.importorskip("ray")
    from jsonagent.store import open_store

    tasks = write_tasks(tmp_path / "t.jsonl",
                        [{"id": f"p{i}", "input": f"q{i}", "session": f"s{i % 2}"}
                         for i in range(6)])
    out = tmp_path / "o.jsonl"
    script = tmp_path / "script.json"
    script.write_text(json.dumps([json.dumps(DONE)]))
    env = {**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray-", dir="/tmp")}
    proc = subprocess.run([sys.executable, "-m", "jsonagent", "batch", str(tasks), "--out",
                           str(out), "--backend", "ray", "--workers", "2", "--store", pg_url,
                           "--model", f"scripted:{script}"],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = read_results(out)
    assert len(results) == 6 and {r["worker"][:4] for r in results} == {"ray:"}
    store = open_store(pg_url)
    try:
        for r in results:
            run = store.load_run(r["run_id"])
            assert run.status == "completed" and run.session_id == r["session_id"]
        assert sorted(s.name for s in store.sessions() if s.name) == ["s0", "s1"]
        assert {s.runs for s in store.sessions() if s.name} == {3}
    finally:
        store.close()


def test_a_timed_out_task_says_so_even_when_the_run_ends_before_cancel_returns():
    """The run may end, and the task be written up, while agent.cancel() is still on its
    way back (Ray's CI once read a timed-out task as "cancelled")."""
    import threading
    from types import SimpleNamespace

    from jsonagent.batch.dispatch import run_task
    from jsonagent.batch.files import Task
    from jsonagent.status import INTERRUPTED
    from jsonagent.usage import Usage

    class SlowToReturn:
        def __init__(self):
            self.stopped = threading.Event()

        def iter(self, text, session=None):
            yield SimpleNamespace(run_id="r1")
            self.stopped.wait(10)
            yield SimpleNamespace(run_id="r1", result=SimpleNamespace(
                status=INTERRUPTED, error="cancelled", answer=None, steps=[], usage=Usage(),
                once=[], run_id="r1", session_id="s1"))

        def cancel(self, run_id):
            self.stopped.set()
            time.sleep(0.5)
            return True

    line = run_task(SlowToReturn(), Task(id="slow", input="x"), timeout=0.2)
    assert line.status == "failed" and line.error == "timed out after 0.2 s"


def test_a_task_timed_out_inside_a_once_call_waits_for_a_person_and_says_it_timed_out():
    """Cancelled at its timeout while a payment ran, the run waits for a person to say
    whether it went through (needs_human, kept); its line still says it timed out, not
    "cancelled" (issue 58, finding 3, from review)."""
    from jsonagent import RunContext, tool
    from jsonagent.batch.dispatch import run_task
    from jsonagent.batch.files import Task

    @tool(effects="once")
    def pay(amount: int, ctx: RunContext) -> str:
        """Pays."""
        ctx.cancel.wait(10)  # the payment API is slow to answer; the timeout stops the wait
        return f"paid {amount}"

    agent = Agent(ScriptedModel([step("pay", {"amount": 3}, "pay")]), tools=[pay])
    line = run_task(agent, Task(id="bill", input="pay 3"), timeout=0.3)
    assert line.status == "needs_human" and line.error == "timed out after 0.3 s"
    assert [(o["tool"], o["ended"]) for o in line.extra["once"]] == [("pay", "cut_short")]
