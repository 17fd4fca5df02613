"""`jsonagent eval` as a person runs it: scripted:FILE models, real subprocesses, resume
after kill -9, the gates' exit codes, compare, Ray, and the HTML report in Chromium."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from jsonagent.batch import read_results
from slow_tools import ctrl_c_once_written, ray_left_behind
from jsonagent.testing import step

DONE = step("TaskCompleteTool", {"output": "1024"}, "done")


def cli(*args, timeout=120, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "jsonagent", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def script(path, *replies):
    path.write_text(json.dumps([json.dumps(r) for r in replies]))
    return f"scripted:{path}"


def slow_tool(tmp_path, seconds=0.0):
    """A tool spec whose handler naps, then appends its argument to calls.txt."""
    (tmp_path / "noter.py").write_text(
        "import time\nfrom pathlib import Path\n\n"
        f"def note(text):\n    time.sleep({seconds})\n"
        f"    with open({str(tmp_path / 'calls.txt')!r}, 'a') as f:\n"
        "        f.write(text + '\\n')\n    return 'noted'\n")
    spec = tmp_path / "note.json"
    spec.write_text(json.dumps([{"name": "Note", "description": "Note it.", "handler": "noter:note",
                                 "parameters": {"type": "object", "properties": {
                                     "text": {"type": "string"}}, "required": ["text"]}}]))
    return spec


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def dataset(tmp_path, body):
    path = tmp_path / "cases.yaml"
    path.write_text(body)
    return path


def test_eval_runs_prints_writes_results_and_a_report(tmp_path):
    model = script(tmp_path / "s.json", step("Note", {"text": "x"}), DONE)
    spec = slow_tool(tmp_path)
    ds = dataset(tmp_path, f"""
defaults: {{tools: [{spec.name}]}}
cases:
  - {{name: right, input: "2**10?", expected: "1024",
     evaluators: [{{trajectory: [Note], mode: exact}}]}}
  - {{name: wrong, input: "2**11?", expected: "2048"}}
""")
    out, html = tmp_path / "r.jsonl", tmp_path / "report.html"
    proc = cli("eval", ds, "-m", model, "--repeat", "2", "-o", out, "--report", html)
    assert proc.returncode == 0, proc.stderr
    assert f"{out}: 4 runs, 4 run now" in proc.stdout
    assert "50.0%" in proc.stdout and "pass@2" in proc.stdout
    assert "errors (the model endpoint failed, an evaluator could not score) are left out" \
        in proc.stdout
    lines = read_results(out)
    assert sorted(r["id"] for r in lines) == [f"{m}/{c}#{k}" for m in [model]
                                              for c in ("right", "wrong") for k in (0, 1)]
    assert all(r["extra"]["model"] == f"scripted:{tmp_path / 's.json'}" for r in lines)
    text = html.read_text()
    assert "<svg" in text and 'class="grid"' in text
    assert "http://" not in text and "https://" not in text and "src=" not in text


def test_kill_9_in_the_middle_then_the_same_command_finishes_without_repeating(tmp_path):
    n = 16
    model = script(tmp_path / "s.json", step("Note", {"text": "called"}), DONE)
    spec = slow_tool(tmp_path, 0.3)
    cases = "\n".join(f"  - {{name: c{i:02}, input: 'case {i}'}}" for i in range(n))
    ds = dataset(tmp_path, f"defaults: {{tools: [{spec}]}}\ncases:\n{cases}\n")
    out = tmp_path / "r.jsonl"
    args = ["eval", ds, "-m", model, "-o", out, "--workers", "2"]
    proc = subprocess.Popen([sys.executable, "-m", "jsonagent", *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists()
                                               or out.read_text().count("\n") < 4):
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    before = [r["id"] for r in read_results(out)]
    assert 4 <= len(before) < n
    workers = {int(r["worker"].rsplit(":", 1)[1]) for r in read_results(out)}
    deadline = time.monotonic() + 10  # orphaned workers notice their parent is gone and leave
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers)
    calls_before = (tmp_path / "calls.txt").read_text().count("\n")
    again = cli("eval", *args[1:])
    assert again.returncode == 0, again.stderr
    assert f"{n} runs, {n - len(before)} run now" in again.stdout
    ids = [r["id"] for r in read_results(out)]
    assert len(ids) == len(set(ids)) == n and ids[:len(before)] == before
    # every run finished before the kill called its tool once; at most the two in flight
    # then (one per worker) called it and ran again
    calls = (tmp_path / "calls.txt").read_text().count("\n")
    assert calls - calls_before == n - len(before)
    assert n <= calls <= n + 2
    rerun = cli("eval", *args[1:])
    assert rerun.returncode == 0 and f"{n} runs, 0 run now" in rerun.stdout
    assert (tmp_path / "calls.txt").read_text().count("\n") == calls


def test_fail_under_exit_codes(tmp_path):
    model = script(tmp_path / "s.json", DONE)
    ds = dataset(tmp_path, "cases:\n  - {input: a, expected: '1024'}\n  - {input: b, expected: '7'}\n")
    assert cli("eval", ds, "-m", model, "--fail-under", "0.5").returncode == 0
    low = cli("eval", ds, "-m", model, "--fail-under", "0.6")
    assert low.returncode == 1
    assert low.stderr.strip().splitlines()[-1] == \
        f"error: --fail-under 0.6: scripted:{tmp_path / 's.json'} passes 50.0% (1 of 2)"


def test_a_model_error_is_shown_as_an_error_and_left_out_of_the_rate(tmp_path):
    model = script(tmp_path / "s.json")  # no replies: every run ends on a ModelError
    ds = dataset(tmp_path, "cases:\n  - {input: a, expected: '1024'}\n")
    proc = cli("eval", ds, "-m", model, "--fail-under", "0.1")
    assert proc.returncode == 1
    assert "has no scored run (only errors)" in proc.stderr
    line = read_results(tmp_path / "cases.results.jsonl")[0]
    assert line["extra"]["verdict"] == "error"
    assert line["extra"]["why"].startswith(
        "the model failed (model_error): scripted model ran out of replies")
    assert "1 run ended on an error of the eval" in proc.stderr
    assert "; --retry-errors runs it again" in proc.stderr
    script(tmp_path / "s.json", DONE)  # the endpoint is back
    assert "1 run, 0 run now" in cli("eval", ds, "-m", model).stdout  # finished, as it was
    again = cli("eval", ds, "-m", model, "--retry-errors", "--fail-under", "1")
    assert again.returncode == 0 and "1 run, 1 run now" in again.stdout, again.stderr
    line, = read_results(tmp_path / "cases.results.jsonl")
    assert line["extra"]["verdict"] == "pass"


@pytest.mark.parametrize("damage,said", [
    (lambda line: line.update(extra="x"), 'not the results of an eval: the line has no "extra" object'),
    (lambda line: line["extra"].update(scores=5), "extra.scores is 5, not a list"),
    (lambda line: line["usage"].update(prompt_tokens=None), "usage.prompt_tokens is None, not an integer"),
], ids=["extra", "scores", "usage"])
def test_a_damaged_results_line_is_one_line_naming_it_and_the_file_is_kept(tmp_path, damage, said):
    """It was `internal error: AttributeError` (or a TypeError), before and after the runs."""
    model = script(tmp_path / "s.json", DONE)
    ds = dataset(tmp_path, "cases:\n  - {input: a, expected: '1024'}\n  - {input: b}\n")
    out = tmp_path / "cases.results.jsonl"
    assert cli("eval", ds, "-m", model).returncode == 0
    lines = out.read_text().splitlines()
    second = json.loads(lines[1])
    damage(second)
    out.write_text("\n".join([lines[0], json.dumps(second)]) + "\n")
    kept = out.read_bytes()
    for proc in cli("eval", ds, "-m", model, "--repeat", "2", "--retry-errors"), \
            cli("eval", "compare", out, out):
        assert proc.returncode == 2 and proc.stderr == f"error: {out}:2: {said}\n"
    assert out.read_bytes() == kept  # no run added, none taken out


def test_retry_errors_leaves_a_run_whose_once_call_went_through_unless_forced(tmp_path):
    """A model error after a payment went through (issue 58, finding 4): run again, the
    payment would go under a new key, which the payment API's idempotency check cannot
    catch. --retry-errors leaves that run; --force runs it, saying what it repeats."""
    from slow_tools import payer

    ledger, spec = payer(tmp_path)
    pay = step("pay", {"amount": 3}, "pay")
    model = script(tmp_path / "s.json", pay)  # then no reply: the model fails after paying
    ds = dataset(tmp_path, f"defaults: {{tools: [{spec.name}]}}\n"
                           "cases:\n  - {name: bill, input: pay, expected: paid}\n")
    first = cli("eval", ds, "-m", model)
    line, = read_results(tmp_path / "cases.results.jsonl")
    run, key, name = line["run_id"], f"{line['run_id']}.1.0", line["id"]
    assert line["extra"]["verdict"] == "error", first.stderr
    assert line["extra"]["once"] == [{"key": key, "tool": "pay", "ended": "returned"}]
    assert ledger.read_text().split() == [key]
    script(tmp_path / "s.json", pay, step("TaskCompleteTool", {"output": "paid"}))  # back
    again = cli("eval", ds, "-m", model, "--retry-errors")
    # nothing scored: not a pass (issue 58, finding 26)
    assert again.returncode == 1 and "1 run, 0 run now" in again.stdout, again.stderr
    assert "(1 only with --force: its once calls would happen again)" in first.stderr
    assert f"{name} is not run again: before its error it called pay (key {key}, " \
           "returned)" in again.stderr and "--force" in again.stderr
    assert ledger.read_text().split() == [key]  # paid once
    forced = cli("eval", ds, "-m", model, "--retry-errors", "--force")
    assert forced.returncode == 0 and "1 run, 1 run now" in forced.stdout, forced.stderr
    assert f"--force: {name} runs again, and with it pay (key {key}, returned) " \
           "again" in forced.stderr
    paid = ledger.read_text().split()
    assert len(paid) == 2 and paid[0] == key and paid[1] != key and run not in paid[1]
    assert cli("eval", ds, "-m", model, "--force").returncode == 2


def test_variants_and_a_judge_in_the_worker(tmp_path):
    right = script(tmp_path / "right.json", DONE)
    wrong = script(tmp_path / "wrong.json", step("TaskCompleteTool", {"output": "12"}))
    judge = script(tmp_path / "judge.json", step("TaskCompleteTool", {"score": 0.9, "reason": "ok"}))
    cases = "\n".join(f"  - {{name: c{i}, input: 'q{i}', expected: '1024'}}" for i in range(9))
    ds = dataset(tmp_path, f"""
evaluators: [{{judge: "Is it right?", model: "{judge}"}}]
variants:
  - {{name: old, model: "{right}"}}
  - {{name: new, model: "{wrong}", temperature: 0.7}}
cases:
{cases}
""")
    proc = cli("eval", ds, "-o", tmp_path / "r.jsonl", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "new passes 0 cases that old fails and fails 9 that old passes: p = 0.00391" \
        in proc.stdout
    assert "mean scores: judge 0.90" in proc.stdout
    several = cli("eval", ds, "-m", right, "-m", wrong)
    assert several.returncode == 2 and "the dataset has variants" in several.stderr


def write_results(path, verdicts, variant="v", dataset="d1"):
    path.write_text("".join(json.dumps({
        "id": f"{variant}/c{i}#0", "status": "completed",
        "extra": {"variant": variant, "case": f"c{i}", "repeat": 0, "verdict": v,
                  "dataset": dataset}}) + "\n"
        for i, v in enumerate(verdicts)))
    return path


def test_compare_lists_the_flips_and_gates_on_a_significant_regression(tmp_path):
    old = write_results(tmp_path / "old.jsonl", ["pass"] * 9 + ["fail", "pass"])
    new = write_results(tmp_path / "new.jsonl", ["pass"] + ["fail"] * 8 + ["pass", "pass"])
    proc = cli("eval", "compare", old, new, "--fail-on-regression")
    assert proc.returncode == 1, proc.stderr
    assert "now fail (8): c1, c2, c3, c4, c5, c6, c7, c8" in proc.stdout
    assert "now pass (1): c9" in proc.stdout
    assert "NEW passes 1 case that OLD fails and fails 8 that OLD passes: p = 0.0391" \
        in proc.stdout
    assert proc.stderr.strip() == "error: NEW is significantly worse than OLD: v"
    other = write_results(tmp_path / "other.jsonl", ["pass"] * 11, dataset="d2")
    assert "note: OLD and NEW are of different datasets (d1 and d2): cases are paired by name" \
        in cli("eval", "compare", old, other).stderr
    assert cli("eval", "compare", old, new).returncode == 0  # no gate asked for
    assert cli("eval", "compare", new, old, "--fail-on-regression").returncode == 0  # better
    noise = write_results(tmp_path / "noise.jsonl", ["fail"] + ["pass"] * 8 + ["pass", "pass"])
    same = cli("eval", "compare", old, noise, "--fail-on-regression")
    assert same.returncode == 0 and "is within the noise, p = 1" in same.stdout


def test_compare_with_an_unreadable_file_is_one_line_and_exit_2(tmp_path):
    old = write_results(tmp_path / "old.jsonl", ["pass"])
    proc = cli("eval", "compare", old, tmp_path / "missing.jsonl")
    assert proc.returncode == 2 and proc.stderr == f"error: {tmp_path / 'missing.jsonl'}: no such results file\n"
    (tmp_path / "batch.jsonl").write_text('{"id": "t", "status": "completed"}\n')
    proc = cli("eval", "compare", old, tmp_path / "batch.jsonl")
    assert proc.returncode == 2 and "not the results of an eval" in proc.stderr


def test_a_bad_dataset_is_one_line_with_file_line_and_field_and_exit_2(tmp_path):
    ds = dataset(tmp_path, "cases:\n  - input: a\n    evaluators:\n      - {regex: '('}\n")
    proc = cli("eval", ds, "-m", "scripted:/nowhere.json")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {ds}:4: cases[0].evaluators[0].regex: not a valid "
                                  "regular expression")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "cases.results.jsonl").exists()


def test_what_would_fail_every_run_is_a_usage_error_before_anything_runs(tmp_path):
    ds = dataset(tmp_path, "cases:\n  - {input: a, tools: [missing.json]}\n")
    no_model = cli("eval", ds)
    assert no_model.returncode == 2 and no_model.stderr == (
        "error: variant default has no model: pass --model NAME, give the variant a model, "
        "or set JSONAGENT_MODEL\n")
    no_tools = cli("eval", ds, "-m", script(tmp_path / "s.json", DONE))
    assert no_tools.returncode == 2 and "missing.json: cannot read tool specs" in no_tools.stderr
    assert not (tmp_path / "cases.results.jsonl").exists()


def test_a_variants_script_is_read_against_the_datasets_folder_and_a_missing_one_stops_it(
        tmp_path):
    """It was read against the working directory: every run was an error, and exit 0."""
    folder, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    script(folder / "s.json", DONE)
    ds = dataset(folder, "variants:\n  - {name: v, model: 'scripted:s.json'}\n"
                         "cases:\n  - {input: a, expected: '1024'}\n")
    proc = cli("eval", ds, cwd=elsewhere)
    assert proc.returncode == 0 and "1 run, 1 run now" in proc.stdout, proc.stderr
    line, = read_results(folder / "cases.results.jsonl")
    assert line["extra"]["verdict"] == "pass"
    assert line["extra"]["model"] == f"scripted:{folder / 's.json'}"
    gone = dataset(folder, "variants:\n  - {name: v, model: 'scripted:gone.json'}\n"
                           "cases:\n  - {input: a}\n")
    proc = cli("eval", gone, "-o", folder / "gone.jsonl", cwd=elsewhere)
    assert proc.returncode == 2 and proc.stderr == (
        f"error: variant v: {folder / 'gone.json'}: cannot read script: No such file or "
        "directory\n")
    assert not (folder / "gone.jsonl").exists()


def test_an_eval_whose_every_run_ends_on_an_error_exits_1_and_its_rerun_says_what_it_kept(
        tmp_path):
    model = script(tmp_path / "s.json")  # no replies: every run ends on a ModelError
    ds = dataset(tmp_path, "cases:\n  - {input: a, expected: '1024'}\n  - {input: b}\n")
    out = tmp_path / "cases.results.jsonl"
    first = cli("eval", ds, "-m", model)
    assert first.returncode == 1 and first.stderr.endswith(
        f"error: no run of {out} was scored: each ended on an error of the eval\n")
    script(tmp_path / "s.json", DONE)  # the endpoint is back, but the errors are kept
    again = cli("eval", ds, "-m", model)
    assert again.returncode == 1
    assert f"{out}: 2 runs, 0 run now, 2 done before (2 ended on an error of the eval and " \
           "were kept: --retry-errors runs them again)" in again.stdout
    retried = cli("eval", ds, "-m", model, "--retry-errors")
    assert retried.returncode == 0 and f"{out}: 2 runs, 2 run now\n" in retried.stdout


def test_an_eval_on_ray(tmp_path):
    """The CLI's own process starts and stops Ray: the tests' process never hosts it."""
    pytest.importorskip("ray")
    model = script(tmp_path / "s.json", DONE)
    ds = dataset(tmp_path, "cases:\n" + "".join(f"  - {{input: q{i}, expected: '1024'}}\n"
                                                for i in range(4)))
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    try:
        proc = cli("eval", ds, "-m", model, "--backend", "ray", "--workers", "2",
                   "--repeat", "2", timeout=240, env={"RAY_TMPDIR": temp})
        left = ray_left_behind(temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not left, f"Ray processes left behind: {left}"
    lines = read_results(tmp_path / "cases.results.jsonl")
    assert len(lines) == 8 and all(r["worker"].startswith("ray:") for r in lines)
    assert all(r["extra"]["verdict"] == "pass" for r in lines)


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package")
def test_the_html_report_opens_a_runs_steps_on_click(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    model = script(tmp_path / "s.json", step("Note", {"text": "<b>hi</b>"}, "noting it"), DONE)
    spec = slow_tool(tmp_path)
    ds = dataset(tmp_path, f"defaults: {{tools: [{spec}]}}\ncases:\n"
                 "  - {name: first, input: a, expected: '1024'}\n"
                 "  - {name: second, input: b, expected: '7'}\n")
    html = tmp_path / "report.html"
    assert cli("eval", ds, "-m", model, "--report", html).returncode == 0
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox"], timeout=30_000)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            page.goto(html.as_uri())
            assert page.locator(".grid .cell").count() == 2
            assert page.locator(".cell.pass").count() == 1
            assert page.locator(".cell.fail").count() == 1
            assert page.locator("svg rect.bar").count() == 1
            page.click(".cell.fail")
            page.wait_for_selector("#run .step")
            text = page.inner_text("#run")
            assert "second" in text and "noting it" in text and "Note" in text
            assert '"<b>hi</b>"' in text  # shown as text, never as markup
            assert "expected (0.00): expected '7', got '1024'" in text
            assert "second / " in text and " / #1" in text
        finally:
            browser.close()


def test_a_run_that_kills_its_worker_is_an_error_and_the_eval_goes_on(tmp_path):
    (tmp_path / "crasher.py").write_text("import os\n\ndef crash():\n    os._exit(3)\n")
    spec = tmp_path / "crash.json"
    spec.write_text(json.dumps([{"name": "Crash", "description": "Crash.",
                                 "handler": "crasher:crash",
                                 "parameters": {"type": "object", "properties": {}}}]))
    crash = script(tmp_path / "crash-script.json", step("Crash"), DONE)
    ds = dataset(tmp_path, f"""
defaults: {{tools: [{spec}]}}
variants: [{{name: v, model: "{crash}"}}]
cases:
  - {{name: boom, input: crash please}}
""")
    out = tmp_path / "r.jsonl"
    proc = cli("eval", ds, "-o", out)
    assert proc.returncode == 1 and "no run of" in proc.stderr  # its only run: nothing scored
    line, = read_results(out)
    assert line["extra"] == {"variant": "v", "case": "boom", "repeat": 0,
                             "dataset": line["extra"]["dataset"]}
    assert line["error"].startswith("worker crashed (exit code 3)")
    assert "0.00-1.00" in proc.stdout  # no scored run: one error
    again = cli("eval", ds, "-o", out)  # its line is a finished run, not a foreign one
    assert again.returncode == 1 and "1 run, 0 run now" in again.stdout  # nothing scored


def test_a_progress_bar_on_a_terminal(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    model = script(tmp_path / "s.json", DONE)
    ds = dataset(tmp_path, "cases:\n" + "".join(f"  - {{input: q{i}, expected: '{i % 2}'}}\n"
                                                for i in range(6)))
    child = pexpect.spawn(sys.executable, ["-m", "jsonagent", "eval", str(ds), "-m", model],
                          encoding="utf-8", timeout=60, env={**os.environ, "COLUMNS": "120"})
    try:
        gap = r"(?:\x1b\[[0-9;]*m|\s)+"
        child.expect(rf"eval{gap}.*6/6{gap}6 failed")  # no case's answer is "0" or "1"
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_one_model_serves_the_variants_that_name_none(tmp_path):
    model = script(tmp_path / "s.json", DONE)
    ds = dataset(tmp_path, "variants: [{name: cold}, {name: react, prompt_style: react}]\n"
                 "cases:\n  - {input: a, expected: '1024'}\n")
    proc = cli("eval", ds, "-m", model, "--fail-under", "1")
    assert proc.returncode == 0, proc.stderr
    lines = read_results(tmp_path / "cases.results.jsonl")
    assert {r["extra"]["variant"] for r in lines} == {"cold", "react"}
    assert {r["extra"]["model"] for r in lines} == {f"scripted:{tmp_path / 's.json'}"}
    assert proc.stdout.index("cold: model") < proc.stdout.index("react: model")


def test_ctrl_c_stops_the_eval_and_the_same_command_finishes_it(tmp_path):
    model = script(tmp_path / "s.json", step("Note", {"text": "called"}), DONE)
    spec = slow_tool(tmp_path, 0.3)
    cases = "".join(f"  - {{name: c{i}, input: 'case {i}'}}\n" for i in range(12))
    ds = dataset(tmp_path, f"defaults: {{tools: [{spec}]}}\ncases:\n{cases}")
    out = tmp_path / "r.jsonl"
    args = ["eval", ds, "-m", model, "-o", out]
    proc = ctrl_c_once_written(args, out, 2)
    err = proc.stderr
    assert proc.returncode == 130
    assert err.strip().endswith(f"interrupted; the finished runs are in {out}: run the same "
                                "command again to finish")
    assert "Traceback" not in err
    again = cli(*args)
    assert again.returncode == 0 and "12 runs" in again.stdout
    assert len({r["id"] for r in read_results(out)}) == len(read_results(out)) == 12
