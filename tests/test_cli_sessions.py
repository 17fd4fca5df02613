"""Sessions, resume and approvals through the real command, across processes, on the real
SQLite file under JSONAGENT_HOME (a temp dir, see conftest)."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

from jsonagent.testing import step

from test_cli import assert_one_line_error, cli, script

DONE = step("TaskCompleteTool", {"output": "sunny in Oslo"}, "done")
ASK = step("AskHumanHelpTool", {"question": "Which city?"}, "need a city")
CODE = step("CodeInterpreterTool", {"code": "print(6 * 7)"}, "compute")


def run_id_from(stderr: str) -> str:
    line = next(line for line in stderr.splitlines() if "jsonagent resume" in line)
    return line.split("jsonagent resume ")[1].split()[0]


def test_a_question_is_answered_by_another_process(tmp_path):
    model = script(tmp_path, ASK, DONE)
    first = cli("run", "weather?", "--model", model, stdin="")
    assert first.returncode == 4, first.stderr
    run_id = run_id_from(first.stderr)
    assert f"jsonagent resume {run_id} --answer TEXT" in first.stderr
    second = cli("resume", run_id, "--answer", "Oslo")  # model and tools come from the record
    assert second.returncode == 0, second.stderr
    assert second.stdout == "sunny in Oslo\n"
    shown = json.loads(cli("sessions", "show", json.loads(
        cli("sessions", "list", "-o", "json").stdout)[0]["id"], "-o", "json").stdout)
    [run] = shown["runs"]
    assert run["id"] == run_id and run["status"] == "completed"
    assert [s["observation"] for s in run["steps"]][0] == "Oslo"


def test_output_json_has_the_run_and_session_ids(tmp_path):
    proc = cli("run", "x", "--model", script(tmp_path, ASK), "--no-input", "-o", "json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 4 and data["run_id"].startswith("run_") and data["session_id"]
    assert data["pending"] == {"kind": "question", "question": "Which city?"}


def test_approval_headless_then_approved_or_denied(tmp_path):
    model = script(tmp_path, CODE, DONE)
    paused = cli("run", "x", "--model", model, "--confirm-code", stdin="")
    assert paused.returncode == 4, paused.stderr
    assert "waiting for approval of CodeInterpreterTool" in paused.stderr
    run_id = run_id_from(paused.stderr)
    approved = cli("resume", run_id, "--approve", "-o", "json")
    assert approved.returncode == 0, approved.stderr
    steps = json.loads(approved.stdout)["steps"]
    assert steps[0]["observation"]["stdout"] == "42\n"

    paused = cli("run", "x", "--model", model, "--confirm-code", "--no-input")
    denied = cli("resume", run_id_from(paused.stderr), "--deny", "--reason", "no code today",
                 "-o", "json")
    assert denied.returncode == 0, denied.stderr
    assert "refused this call: no code today" in json.loads(denied.stdout)["steps"][0]["observation"]["error"]


def test_resume_refuses_input_that_does_not_fit(tmp_path):
    paused = cli("run", "x", "--model", script(tmp_path, ASK, DONE), stdin="")
    run_id = run_id_from(paused.stderr)
    wrong = cli("resume", run_id, "--approve")
    assert wrong.returncode == 2 and "waits for an answer" in wrong.stderr
    assert_one_line_error(wrong)
    unknown = cli("resume", "run_nope", "--answer", "x")
    assert unknown.returncode == 2 and "no run run_nope" in unknown.stderr
    assert cli("resume", run_id, "--answer", "Oslo").returncode == 0


def test_resume_refuses_changed_tools_unless_given(tmp_path):
    spec = tmp_path / "t.json"
    spec.write_text(json.dumps([{"name": "AskHumanHelpTool", "parameters": [
        {"name": "question", "type": "string"}]}, {"name": "TaskCompleteTool", "parameters": [
            {"name": "output", "type": "string"}]}]))
    paused = cli("run", "x", "--tools", spec, "--no-core-tools", "--model",
                 script(tmp_path, ASK, DONE), stdin="")
    run_id = run_id_from(paused.stderr)
    spec.write_text(spec.read_text().replace('"string"}]}]', '"string", "description": "new"}]}]'))
    changed = cli("resume", run_id, "--answer", "Oslo")
    assert changed.returncode == 2 and "pass --tools" in changed.stderr
    assert_one_line_error(changed)
    ok = cli("resume", run_id, "--answer", "Oslo", "--tools", spec)
    assert ok.returncode == 0, ok.stderr


def test_named_session_continues_in_a_new_process_and_exports(tmp_path):
    model = script(tmp_path, DONE)
    assert cli("run", "first", "--session", "trip", "--model", model).returncode == 0
    assert cli("run", "second", "--session", "trip", "--model", model).returncode == 0
    sessions = json.loads(cli("sessions", "list", "-o", "json").stdout)
    assert [(s["name"], s["runs"]) for s in sessions] == [("trip", 2)]
    shown = cli("sessions", "show", "trip")
    assert "you: first" in shown.stdout and "you: second" in shown.stdout
    exported = [json.loads(line) for line in cli("sessions", "export", "trip").stdout.splitlines()]
    starts = [e for e in exported if e["type"] == "run_start"]
    assert [e["question"] for e in starts] == ["first", "second"]
    # the second run saw the first one's history
    assert cli("sessions", "delete", "trip").returncode == 0
    assert json.loads(cli("sessions", "list", "-o", "json").stdout) == []
    missing = cli("sessions", "show", "trip")
    assert missing.returncode == 2 and "no session 'trip'" in missing.stderr


def slow_tool(tmp_path, seconds=30):
    (tmp_path / "slow.py").write_text(
        "import time\ndef wait(seconds):\n    time.sleep(seconds)\n    return 'waited'\n")
    (tmp_path / "slow.json").write_text(json.dumps(
        [{"name": "wait", "handler": "slow:wait", "parameters": [{"name": "seconds", "type": "float"}]}]))
    return tmp_path / "slow.json"


def spawn(*args):
    return subprocess.Popen([sys.executable, "-m", "jsonagent", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def wait_for_event(kind: str, timeout: float = 30):
    db = os.path.join(os.environ["JSONAGENT_HOME"], "jsonagent.db")
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            row = sqlite3.connect(db).execute(
                "SELECT run_id FROM events WHERE type = ?", (kind,)).fetchone()
        except sqlite3.Error:
            row = None
        if row:
            return row[0]
        time.sleep(0.05)
    raise AssertionError(f"no {kind} event within {timeout}s")


def test_kill_9_during_a_tool_call_then_show_and_resume(tmp_path):
    spec = slow_tool(tmp_path)
    model = script(tmp_path, step("wait", {"seconds": 3}), step("wait", {"seconds": 0.1}), DONE)
    proc = spawn("run", "x", "--tools", spec, "--model", model, "--session", "crash")
    try:
        run_id = wait_for_event("run_start")
        time.sleep(1.0)  # inside the 3 s tool call
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
    shown = json.loads(cli("sessions", "show", "crash", "-o", "json").stdout)
    assert [(r["id"], r["status"]) for r in shown["runs"]] == [(run_id, "interrupted")]
    assert "go on: jsonagent resume" in cli("sessions", "show", "crash").stdout
    # only the step in flight is done again, then the script goes on
    resumed = cli("resume", run_id, "-o", "json", timeout=90)
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert [s["tool"] for s in data["steps"]] == ["wait", "wait", "TaskCompleteTool"]
    assert data["steps"][0]["observation"] == "waited"


def test_two_processes_on_one_session_one_is_told_it_is_busy(tmp_path):
    spec = slow_tool(tmp_path)
    model = script(tmp_path, step("wait", {"seconds": 12}), DONE)
    first = spawn("run", "x", "--tools", spec, "--model", model, "--session", "shared")
    try:
        wait_for_event("run_start")
        second = cli("run", "y", "--tools", spec, "--model", script(tmp_path, DONE),
                     "--session", "shared")
        assert second.returncode == 1
        assert "session busy" in second.stderr and "is running" in second.stderr
        assert_one_line_error(second)
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    db = sqlite3.connect(os.path.join(os.environ["JSONAGENT_HOME"], "jsonagent.db"))
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert cli("run", "z", "--model", script(tmp_path, DONE), "--session", "shared").returncode == 0



def test_a_call_shown_by_sessions_show_has_its_escapes_as_text(tmp_path):
    """The model's arguments are printed as text too: JSON escapes the C0 controls, not a
    C1 one (\\x9b, a CSI on some terminals) nor a bidi override."""
    ask = step("AskHumanHelpTool", {"question": "city\x9b2J\u202eexe?"}, "ask")
    assert cli("run", "x", "--session", "c1", "--no-input",
               "--model", script(tmp_path, ask)).returncode == 4
    shown = cli("sessions", "show", "c1").stdout
    assert "city\\x9b2J\\u202eexe?" in shown, shown
    assert not any(c in shown for c in "\x9b\u202e"), repr(shown)

def test_no_store_leaves_no_database(tmp_path):
    proc = cli("run", "x", "--no-store", "--model", script(tmp_path, DONE))
    assert proc.returncode == 0
    assert not os.path.exists(os.path.join(os.environ["JSONAGENT_HOME"], "jsonagent.db"))


def test_a_session_name_with_terminal_escapes_is_shown_escaped(tmp_path):
    """A session's name may be an AG-UI client's threadId: its escapes (a window title, a
    cleared screen, a bidi override) are printed as text, never sent to the terminal."""
    name = "evil\x1b]0;pwned\x07\x1b[2J\u202eexe.txt\r\nnext"
    done = cli("run", "hi\x1b[31m", "--model", script(tmp_path, DONE), "--session", name)
    assert done.returncode == 0, done.stderr
    listed = cli("sessions", "list")
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\u202eexe.txt\\x0d\\x0anext" in listed.stdout
    shown = cli("sessions", "show", name)
    assert "you: hi\\x1b[31m" in shown.stdout
    for out in (listed.stdout, shown.stdout):
        assert not any(c in out for c in "\x1b\x07\r\u202e"), repr(out)
    # the JSON output stays exact: it is data, escaped by JSON itself
    assert json.loads(cli("sessions", "list", "-o", "json").stdout)[0]["name"] == name
