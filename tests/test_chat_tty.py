"""`jsonagent chat` in a real pseudo-terminal: Ctrl-C cancels a turn, not the conversation;
Ctrl-C or Ctrl-D at the prompt leaves cleanly."""

import io
import json
import os
import sys

import pexpect
import pytest

from jsonagent.testing import step

from test_cli import script
from test_cli_sessions import slow_tool


def chat(tmp_path, *args):
    env = {**os.environ, "TERM": "dumb", "COLUMNS": "100"}
    child = pexpect.spawn(sys.executable, ["-m", "jsonagent", "chat", *map(str, args)],
                          env=env, encoding="utf-8", timeout=30, cwd=str(tmp_path))
    child.expect_exact("you> ")
    return child


@pytest.fixture
def cleanup():
    children = []
    yield children.append
    for child in children:
        if child.isalive():
            child.terminate(force=True)


def test_ctrl_c_cancels_the_turn_and_the_chat_goes_on(tmp_path, cleanup):
    spec = slow_tool(tmp_path)
    model = script(tmp_path, step("wait", {"seconds": 60}, "waiting"),
                   step("TaskCompleteTool", {"output": "done"}))
    child = chat(tmp_path, "--tools", spec, "--model", model, "--session", "tty")
    cleanup(child)
    child.sendline("please wait")
    child.expect_exact("→ wait")  # the call is shown: the tool is running now
    child.sendintr()
    child.expect("interrupted")
    child.expect_exact("you> ")  # back at the prompt, the conversation kept
    child.sendline("/help")
    child.expect_exact("/reset")
    child.expect_exact("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    out = pexpect.run(f"{sys.executable} -m jsonagent sessions show tty -o json", encoding="utf-8",
                      env={**os.environ})
    [run] = json.loads(out)["runs"]
    assert run["status"] == "interrupted"
    assert "interrupted by the user" in run["steps"][0]["observation"]["error"]


def test_ctrl_c_at_the_prompt_exits_0_on_a_new_line(tmp_path, cleanup):
    child = chat(tmp_path, "--model", script(tmp_path, step("TaskCompleteTool", {"output": "x"})))
    cleanup(child)
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert child.before.endswith("\r\n")  # the shell's prompt gets a line of its own


def test_an_approval_is_asked_at_the_terminal(tmp_path, cleanup):
    model = script(tmp_path, step("CodeInterpreterTool", {"code": "print(6 * 7)"}, "compute"),
                   step("TaskCompleteTool", {"output": "42"}))
    for answer, shown in (("y", "approved"), ("n", "denied")):
        child = pexpect.spawn(sys.executable, ["-m", "jsonagent", "run", "x", "--confirm-code",
                                               "--model", model], env={**os.environ, "TERM": "dumb"},
                              encoding="utf-8", timeout=60, cwd=str(tmp_path))
        cleanup(child)
        child.expect_exact("allow this call? CodeInterpreterTool")
        child.expect_exact("print(6 * 7)")  # the exact call
        child.expect_exact("allow? [y/N] ")
        child.sendline(answer)
        child.expect_exact(shown)
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0


def test_the_thought_is_written_before_the_call_line(tmp_path, cleanup):
    """On a terminal the thought appears as the model writes it, in place of the spinner;
    the call line comes once the step is whole, and the thought is not shown twice."""
    thought = "looking up the time in Tokyo before answering"
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"chunk": 4, "delay": 0.08, "replies": [
        step("GetTimeTools", {"timezone": "Asia/Tokyo"}, thought),
        step("TaskCompleteTool", {"output": "noon"}, "done")]}))
    child = pexpect.spawn(sys.executable, ["-m", "jsonagent", "run", "time?", "--no-store",
                                           "--model", f"scripted:{path}"],
                          env={**os.environ, "TERM": "dumb", "COLUMNS": "200"},
                          encoding="utf-8", timeout=30, cwd=str(tmp_path))
    cleanup(child)
    child.logfile_read = screen = io.StringIO()
    child.expect_exact("step 1 " + thought[:8])  # two pieces in: the step is still being written
    assert "→" not in screen.getvalue()
    child.expect_exact(thought[8:])
    child.expect_exact("→ GetTimeTools")
    child.expect_exact("noon")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert screen.getvalue().count(thought) == 1  # written once, not printed again
    assert f"step 1 {thought} (model" in screen.getvalue()
