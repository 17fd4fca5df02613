"""`jsonagent sandbox run|check`: a thin layer that prints JSON or a report, and fails in one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from typer.testing import CliRunner

from jsonagent.cli.sandbox import app

runner = CliRunner()


def test_run_reads_stdin_and_prints_the_result_as_json():
    result = runner.invoke(app, ["run", "-", "--timeout", "5", "--memory", "256"], input="x = 6\nprint(x * 7)\n")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["stdout"] == "42\n" and data["exit_code"] == 0 and data["workdir"] is None


def test_run_a_file_keeps_the_files_it_writes(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("open('report.txt', 'w').write('done')\n")
    result = runner.invoke(app, ["run", str(script)])
    data = json.loads(result.output)
    assert data["files_changed"] == ["report.txt"]
    try:
        assert open(f"{data['workdir']}/report.txt").read() == "done"
    finally:
        shutil.rmtree(data["workdir"])


def test_run_reports_a_failing_cell_with_exit_code_1():
    result = runner.invoke(app, ["run", "-"], input="1/0\n")
    assert result.exit_code == 1 and "ZeroDivisionError" in json.loads(result.output)["error"]


def test_run_a_missing_file_is_one_line_without_traceback(tmp_path):
    result = runner.invoke(app, ["run", str(tmp_path / "missing.py")])
    assert result.exit_code == 1
    # one line, naming the file, from the one home of bounded reads (errors.read_text)
    assert result.output == f"error: {tmp_path / 'missing.py'}: cannot read code: No such " \
        "file or directory\n"


def test_check_prints_the_report():
    result = runner.invoke(app, ["check"])
    assert result.exit_code == 0, result.output
    for label in ("namespaces", "landlock", "seccomp", "network", "runs code", "verdict"):
        assert label in result.output
    strict = runner.invoke(app, ["check", "--json", "--strict"])
    data = json.loads(strict.output)
    assert strict.exit_code == (0 if data["complete"] else 2) and data["runs_code"] is True


def test_mounted_in_the_main_cli():
    out = subprocess.run([sys.executable, "-m", "jsonagent", "sandbox", "check"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "verdict" in out.stdout, out.stderr


def run_command(*args: str, code: str) -> subprocess.CompletedProcess:
    """The installed command, as people type it: stdout is the JSON, stderr the notes."""
    return subprocess.run([sys.executable, "-m", "jsonagent", "sandbox", "run", "-", *args],
                          input=code, capture_output=True, text=True, timeout=60)


def test_run_says_the_code_hit_the_memory_limit_and_what_sets_it():
    from jsonagent.notes import note

    proc = run_command("--memory", "256", code="x = bytearray(10 * 1024 ** 3)\n")
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["error"].rstrip().endswith("MemoryError")
    said = note("out_of_memory", limit=256, setting="--memory MB")  # the model's text too
    assert data["note"] == said and proc.stderr.strip() == f"note: {said}"
    assert "256 MB" in said and "--memory" in said


def test_run_says_the_time_limit_and_cut_output_and_what_sets_them():
    slow = run_command("--timeout", "0.5", code="while True: pass\n")
    assert json.loads(slow.stdout)["timed_out"] is True
    assert "time limit of 0.5 s (--timeout SECONDS sets it)" in slow.stderr
    loud = run_command("--output-limit", "100", code="print('x' * 5000)\n")
    data = json.loads(loud.stdout)
    assert loud.returncode == 0 and data["stdout_truncated"] is True and len(data["stdout"]) <= 100
    assert "keeps 100 bytes of each stream (--output-limit BYTES sets it)" in data["note"]
    assert "5001 bytes to stdout" in loud.stderr
