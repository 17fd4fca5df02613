"""What a hostile pass found in the CLI (issue 24): messages that say what to do, one rule for
session names, a closed pipe as a normal end. Each runs the real command."""

from __future__ import annotations

import subprocess
import sys

from test_cli import assert_one_line_error, cli, script
from jsonagent.testing import step

ASK = step("AskHumanHelpTool", {"question": "Which city?"})
APPROVE = step("CodeInterpreterTool", {"code": "print(1)"})


def paused_run(tmp_path, *replies, session="desk", extra=()) -> str:
    proc = cli("run", "x", "--session", session, "--no-input", "--output", "json", *extra,
               "--model", script(tmp_path, *replies))
    assert proc.returncode == 4, proc.stderr
    import json

    return json.loads(proc.stdout)["run_id"]


def test_resume_names_the_flag_the_run_waits_for(tmp_path):
    run_id = paused_run(tmp_path, ASK)
    for args in (["--approve"], []):  # a wrong decision, and none at all without a TTY
        proc = cli("resume", run_id, *args, stdin="")
        assert proc.returncode == 2 and "--answer TEXT" in proc.stderr, proc.stderr
        assert_one_line_error(proc)
    run_id = paused_run(tmp_path, APPROVE, session="other", extra=["--confirm-code"])
    proc = cli("resume", run_id, "--answer", "yes", stdin="")
    assert proc.returncode == 2 and "--approve" in proc.stderr and "--deny" in proc.stderr


def test_a_new_run_on_a_session_that_waits_is_a_usage_error(tmp_path):
    paused_run(tmp_path, ASK)
    proc = cli("run", "again", "--session", "desk", "--model", script(tmp_path, ASK))
    assert proc.returncode == 2 and "--answer TEXT" in proc.stderr, proc.stderr
    assert_one_line_error(proc)


def test_session_names_follow_one_rule_on_every_surface(tmp_path):
    for name, length in (("", 0), ("x" * 201, 201)):
        proc = cli("run", "q", "--session", name, "--model", script(tmp_path, ASK))
        assert proc.returncode == 2, proc.stderr
        assert f"1 to 200 characters (this one has {length})" in proc.stderr
        assert_one_line_error(proc)
    assert cli("run", "q", "--session", "x" * 200, "--no-input",
               "--model", script(tmp_path, ASK)).returncode == 4


def test_a_closed_pipe_ends_any_command_quietly(tmp_path):
    paused_run(tmp_path, ASK, session="long", extra=())
    big = "w" * 120_000  # more than a pipe holds, so the writer meets the closed end
    cli("run", big, "--session", "big", "--no-input", "--model", script(tmp_path, ASK))
    for args in (["sessions", "show", "big"], ["sessions", "export", "big"],
                 ["sessions", "list"]):
        shell = subprocess.run(
            f"{sys.executable} -m jsonagent {' '.join(args)} | head -c 10 > /dev/null; "
            "echo ${PIPESTATUS[0]} >&2", shell=True, executable="/bin/bash",
            capture_output=True, text=True, timeout=60)
        assert "Traceback" not in shell.stderr and "BrokenPipe" not in shell.stderr, shell.stderr
        assert "error" not in shell.stderr, shell.stderr
        assert shell.stderr.strip().splitlines()[-1] == "0", shell.stderr


def test_a_batch_task_without_a_session_is_resumable(tmp_path):
    import json

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "input": "weather?"}) + "\n")
    model = script(tmp_path, ASK, step("TaskCompleteTool", {"output": "sunny"}))
    proc = cli("batch", tasks, "--out", tmp_path / "out.jsonl", "--model", model)
    [line] = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert line["status"] == "needs_human" and line["run_id"], (line, proc.stderr)
    done = cli("resume", line["run_id"], "--answer", "Oslo", stdin="")
    assert done.returncode == 0 and done.stdout.strip() == "sunny", done.stderr


def test_a_memory_error_in_the_code_says_the_limit_and_what_sets_it(tmp_path):
    import json

    code = step("CodeInterpreterTool", {"code": "x = bytearray(3 * 1024 ** 3)"})
    proc = cli("run", "x", "--no-store", "--output", "json",
               "--model", script(tmp_path, code, step("TaskCompleteTool", {"output": "no"})))
    assert proc.returncode == 0, proc.stderr
    observation = json.loads(proc.stdout)["steps"][0]["observation"]
    assert observation["error"].rstrip().endswith("MemoryError")
    assert "1024 MB" in observation["note"] and "sandbox_memory_mb" in observation["note"]


def test_a_run_of_a_relative_script_resumes_from_another_directory(tmp_path):
    """The run kept `scripted:script.json` as given, read against resume's directory
    (issue 58, finding 28)."""
    import json
    import os

    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    script(here, ASK, step("TaskCompleteTool", {"output": "Oslo it is"}))

    def jsonagent(*args, cwd):
        return subprocess.run([sys.executable, "-m", "jsonagent", *args], cwd=cwd,
                              capture_output=True, text=True, timeout=60, env=os.environ)

    paused = jsonagent("run", "x", "--no-input", "--output", "json",
                       "--model", "scripted:script.json", cwd=here)
    assert paused.returncode == 4, paused.stderr
    run_id = json.loads(paused.stdout)["run_id"]
    done = jsonagent("resume", run_id, "--answer", "Oslo", cwd=there)
    assert done.returncode == 0 and "Oslo it is" in done.stdout, done.stderr


def test_a_model_path_is_read_against_its_folder_and_a_catalog_name_stays(tmp_path):
    """A dataset's `local:models/x.gguf` is its folder's, as its `scripted:` files are; a
    stored run's must load from any directory (issue 58, findings 26 and 28)."""
    from jsonagent.models import anchored

    assert anchored("scripted:s.json", tmp_path) == f"scripted:{tmp_path / 's.json'}"
    assert anchored("local:models/x.gguf", tmp_path) == f"local:{tmp_path / 'models/x.gguf'}"
    assert anchored("local:x.gguf", tmp_path) == f"local:{tmp_path / 'x.gguf'}"
    for kept in ("local:qwen2.5-coder-1.5b", "local", "gpt-4o-mini", "openai:gpt-4o"):
        assert anchored(kept, tmp_path) == kept
