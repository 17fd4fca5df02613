"""The CLI as a real subprocess: exit codes, output, and the transcript it leaves."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from jsonagent import read_journal
from jsonagent.testing import step

from openai_stub import OpenAIStub

DONE = step("TaskCompleteTool", {"output": "the answer is 4"}, "done")


def cli(*args, stdin=None, timeout=60, env=None):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "jsonagent", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def script(tmp_path, *replies):
    path = tmp_path / "script.json"
    path.write_text(json.dumps([r if isinstance(r, str) else json.dumps(r) for r in replies]))
    return f"scripted:{path}"


def assert_one_line_error(proc):
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr


def test_run_completed_prints_answer_and_writes_transcript(tmp_path):
    transcript = tmp_path / "t.jsonl"
    proc = cli("run", "what time is it?", "--model",
               script(tmp_path, step("GetTimeTools", {"timezone": "UTC"}, "need the time"), DONE),
               "--transcript", transcript)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "the answer is 4\n"
    assert "need the time" in proc.stderr and "→ GetTimeTools" in proc.stderr
    events = read_journal(transcript)
    assert [e.type for e in events] == ["run_start", "model_reply", "step", "tool_result",
                                        "model_reply", "step", "run_end"]
    assert events[0].question == "what time is it?"
    assert events[3].observation["timezone"] == "UTC"
    assert events[-1].status == "completed"


def test_output_json_is_the_run_result(tmp_path):
    proc = cli("run", "x", "--model", script(tmp_path, DONE), "--output", "json")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["status"] == "completed" and data["answer"] == "the answer is 4"
    assert data["stats"]["model_calls"] == 1 and proc.stderr == ""


def test_failed_exit_1(tmp_path):
    proc = cli("run", "x", "--model", script(tmp_path, "no", "no", "no"))
    assert proc.returncode == 1
    assert "failed:" in proc.stderr and "no valid reply after 3 tries" in proc.stderr


def test_max_steps_exit_3(tmp_path):
    proc = cli("run", "x", "--max-steps", "2", "--model",
               script(tmp_path, step("GetTimeTools"), step("GetTimeTools")))
    assert proc.returncode == 3 and "max_steps" in proc.stderr


def test_needs_human_exit_4_without_a_tty(tmp_path):
    transcript = tmp_path / "t.jsonl"
    proc = cli("run", "x", "--transcript", transcript, "--model",
               script(tmp_path, step("AskHumanHelpTool", {"question": "Which city?"})), stdin="")
    assert proc.returncode == 4
    assert "Which city?" in proc.stderr
    assert read_journal(transcript)[-1].pending.question == "Which city?"


def test_needs_human_exit_4_with_no_input_flag(tmp_path):
    proc = cli("run", "x", "--no-input", "--output", "json", "--model",
               script(tmp_path, step("AskHumanHelpTool", {"question": "Which city?"})))
    assert proc.returncode == 4
    assert json.loads(proc.stdout)["pending"] == {"kind": "question", "question": "Which city?"}


def test_interrupted_exit_130_keeps_the_transcript(tmp_path):
    (tmp_path / "slow.py").write_text("import time\ndef wait(seconds):\n    time.sleep(seconds)\n")
    (tmp_path / "slow.json").write_text(json.dumps(
        [{"name": "wait", "handler": "slow:wait", "parameters": [{"name": "seconds", "type": "float"}]}]))
    transcript = tmp_path / "t.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jsonagent", "run", "x", "--tools", tmp_path / "slow.json",
         "--transcript", transcript, "--model", script(tmp_path, step("wait", {"seconds": 30}))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    # the step event itself: a model_reply line has a "step" field too
    while time.time() < deadline and not (transcript.exists() and '"type":"step"' in transcript.read_text()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    events = read_journal(transcript)
    assert [e.type for e in events][-3:] == ["step", "tool_result", "run_end"]
    assert "interrupted by the user" in events[-2].observation["error"]  # the history stays whole
    assert events[-1].status == "interrupted"


@pytest.mark.parametrize("args,fragment", [
    (["run", "x"], "no model: pass --model"),
    (["run", "x", "--model", "scripted:/nonexistent.json"], "cannot read script"),
    (["run", "x", "--model", "gpt-4o-mini"], "no API key"),
    (["run", "x", "--model", "local", "--base-url", "http://127.0.0.1:9/v1"],
     "runs llama.cpp in this process, so --base-url has nothing to do"),
])
def test_configuration_errors_exit_2_in_one_line(args, fragment):
    proc = cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert_one_line_error(proc)
    assert fragment in proc.stderr


def test_bad_tools_file_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "t", "parameters": [{"name": "x", "type": "strnig"}]}]))
    proc = cli("run", "x", "--tools", bad, "--model", script(tmp_path, DONE))
    assert proc.returncode == 2
    assert_one_line_error(proc)
    assert f"{bad}[0] (t): /parameters/0/type" in proc.stderr


def test_usage_error_exit_2():
    proc = cli("run", "x", "--json-mode", "yaml")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_against_an_openai_compatible_endpoint(tmp_path):
    replies = [json.dumps(step("GetTimeTools")), json.dumps(DONE)]
    with OpenAIStub(replies) as stub:
        proc = cli("run", "x", "--model", "stub-model", "--base-url", stub.url,
                   "--json-mode", "schema", env={"OPENAI_API_KEY": "sk-cli"})
    assert proc.returncode == 0, proc.stderr
    assert stub.requests[0]["body"]["response_format"]["type"] == "json_schema"
    assert stub.requests[0]["auth"] == "Bearer sk-cli"


def test_dead_endpoint_is_one_line_exit_6():
    """6: the model failed for now (it may answer later)."""
    proc = cli("run", "x", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
               env={"OPENAI_API_KEY": "k"}, timeout=120)
    assert proc.returncode == 6
    assert "failed (unavailable): cannot reach http://127.0.0.1:9/v1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_chat_reads_turns_and_answers_pending_questions(tmp_path):
    # a scripted:FILE run always starts at the file's first reply
    model = script(tmp_path, step("AskHumanHelpTool", {"question": "Which city?"}),
                   step("TaskCompleteTool", {"output": "sunny in Oslo"}))
    proc = cli("chat", "--model", model, stdin="weather?\nOslo\nand tomorrow?\nBergen\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["sunny in Oslo", "sunny in Oslo"]


def test_tools_list():
    proc = cli("tools", "list")
    assert proc.returncode == 0
    assert "GetTimeTools(timezone?: string, format?: string)" in proc.stdout
    names = [t["name"] for t in json.loads(cli("tools", "list", "-o", "json").stdout)]
    assert names == ["GetTimeTools", "AskHumanHelpTool", "TaskCompleteTool", "CodeInterpreterTool"]


def test_tools_validate(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"name": "ok"}))
    bad.write_text("{not json")
    proc = cli("tools", "validate", good, bad)
    assert proc.returncode == 2
    assert f"ok: {good}: 1 tool(s): ok" in proc.stdout
    assert f"{bad}:1:2: invalid JSON" in proc.stderr


def test_tools_validate_imports_handlers_unless_told_not_to(tmp_path):
    spec = tmp_path / "h.json"
    spec.write_text(json.dumps({"name": "t", "handler": "no_such_module:fn"}))
    proc = cli("tools", "validate", spec)
    assert proc.returncode == 2
    assert "cannot load handler 'no_such_module:fn': ModuleNotFoundError" in proc.stderr
    assert_one_line_error(proc)
    (tmp_path / "here.py").write_text("def fn():\n    return 1\n")
    spec.write_text(json.dumps({"name": "t", "handler": "here:fn"}))
    assert cli("tools", "validate", spec).returncode == 0  # a module beside the spec imports
    spec.write_text(json.dumps({"name": "t", "handler": "no_such_module:fn"}))
    assert cli("tools", "validate", "--no-import", spec).returncode == 0


def test_tools_check():
    ok = cli("tools", "check", "core_function.json", "--tool", "GetTimeTools", "--args", '{"timezone": "UTC"}')
    assert ok.returncode == 0 and "ok" in ok.stdout
    bundled = cli("tools", "check", "--tool", "GetTimeTools", "--args", '{"timezone": "UTC"}')
    assert bundled.returncode == 0 and "ok" in bundled.stdout  # the same default as tools call
    bad = cli("tools", "check", "core_function.json", "--tool", "GetTimeTools", "--args", '{"timezone": 1, "x": 2}')
    assert bad.returncode == 1
    assert "invalid: /timezone: expected string, got integer 1" in bad.stdout
    assert "invalid: /x: unexpected argument" in bad.stdout
    unknown = cli("tools", "check", "core_function.json", "--tool", "Nope", "--args", "{}")
    assert unknown.returncode == 2 and "no tool named 'Nope'" in unknown.stderr
    garbage = cli("tools", "check", "core_function.json", "--tool", "GetTimeTools", "--args", "{x")
    assert garbage.returncode == 2 and "--args is not valid JSON" in garbage.stderr


def test_tools_call():
    proc = cli("tools", "call", "GetTimeTools", "--args", '{"timezone": "Asia/Tokyo"}')
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["timezone"] == "Asia/Tokyo"
    bad_zone = cli("tools", "call", "GetTimeTools", "--args", '{"timezone": "Nowhere/Land"}')
    assert bad_zone.returncode == 1 and "unknown time zone 'Nowhere/Land'" in bad_zone.stderr
    human = cli("tools", "call", "AskHumanHelpTool", "--args", '{"question": "ok?"}', stdin="")
    assert human.returncode == 4 and "ok?" in human.stderr


def test_help_and_version():
    assert cli("--help").returncode == 0
    assert cli("--version").stdout.strip() == "0.1.0"


def test_non_utf8_inputs_are_clear(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'["caf\xe9"]')
    proc = cli("run", "x", "--model", f"scripted:{bad}")
    assert proc.returncode == 2 and "not UTF-8 text" in proc.stderr
    assert_one_line_error(proc)
    transcript = tmp_path / "t.jsonl"
    proc = subprocess.run([sys.executable, "-m", "jsonagent", "run", b"caf\xe9?", "--model",
                           script(tmp_path, DONE), "--transcript", str(transcript)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert read_journal(transcript)[0].question == "caf\ufffd?"


def test_debug_flag_after_the_command_shows_the_traceback(tmp_path):
    proc = cli("run", "x", "--model", "scripted:", "--debug")
    assert "Traceback" in proc.stderr and "ConfigError" in proc.stderr
    proc = cli("run", "x", "--model", "scripted:")
    assert proc.returncode == 2 and "scripted: needs a file" in proc.stderr
