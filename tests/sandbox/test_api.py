"""The Sandbox API other parts of the project depend on: shape, state, files, lifecycle, threads."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time

import pytest

from jsonagent.bundled import sandbox
from probes import assert_alive, assert_no_survivors, marker

ExecResult, IsolationUnavailable, Sandbox, SandboxClosed = (
    sandbox.ExecResult, sandbox.IsolationUnavailable, sandbox.Sandbox, sandbox.SandboxClosed)


def test_public_names_are_pinned():
    assert sorted(sandbox.__all__) == [
        "ExecResult", "IsolationReport", "IsolationUnavailable", "IsolationWarning", "Limits",
        "Sandbox", "SandboxClosed", "SandboxError", "SandboxStartError",
    ]


def test_example_from_the_issue(sb):
    r = sb.run("x = 41\nprint(x + 1)", timeout=None)
    assert isinstance(r, ExecResult)
    assert (r.stdout, r.stderr, r.error, r.exit_code) == ("42\n", "", None, 0)
    assert not (r.timed_out or r.crashed or r.state_lost or r.stdout_truncated or r.stderr_truncated)
    assert r.stdout_bytes == 3 and r.duration_s > 0 and r.files_changed == ()


def test_state_persists_and_the_last_expression_is_shown(sb):
    assert sb.run("import math\ndef area(r):\n    return math.pi * r * r").ok
    assert sb.run("round(area(2), 3)").stdout == "12.566\n"
    assert sb.run("None").stdout == ""


def test_exceptions_are_results_with_a_clean_traceback(sb):
    r = sb.run("def f():\n    return 1 / 0\nf()")
    assert r.exit_code == 1 and not r.crashed
    assert r.error.startswith("Traceback") and "ZeroDivisionError" in r.error
    assert 'File "<cell' in r.error and "return 1 / 0" in r.error and "worker.py" not in r.error
    syntax = sb.run("def broken(:")
    assert "SyntaxError" in syntax.error and syntax.exit_code == 1
    assert_alive(sb)


def test_result_is_frozen_and_json_serialisable(sb):
    r = sb.run("open('made.txt', 'w').write('x')")
    data = json.loads(json.dumps(r.to_dict()))
    assert data["files_changed"] == ["made.txt"] and data == r.model_dump()
    assert set(data) == {f.name for f in dataclasses.fields(ExecResult)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.stdout = "changed"


def test_isolation_report_is_readable_and_serialisable(sb):
    iso = sb.isolation
    text = iso.describe()
    for label in ("namespaces", "landlock", "seccomp", "network", "rlimits", "disk quota"):
        assert label in text
    json.dumps(iso.to_dict())
    assert iso.complete == (iso.missing() == [])


def test_files_are_copied_in_and_originals_untouched(make_sandbox, tmp_path):
    original = tmp_path / "data.csv"
    original.write_text("a,b\n1,2\n")
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "helper.py").write_text("VALUE = 7\n")
    box = make_sandbox(files=[original, folder])
    r = box.run("print(open('data.csv').read().count(','))\n"
                "open('data.csv', 'a').write('3,4\\n')\nfrom pkg.helper import VALUE\nprint(VALUE)")
    assert r.stdout == "2\n7\n" and r.files_changed == ("data.csv",)
    assert original.read_text() == "a,b\n1,2\n"                        # the original is untouched
    assert (box.workdir / "data.csv").read_text() == "a,b\n1,2\n3,4\n"  # the workdir copy changed


def test_files_changed_lists_created_and_modified_files_only(sb):
    assert sb.run("import os\nos.makedirs('out/sub')\nopen('out/sub/a.txt', 'w').write('1')\n"
                  "open('b.txt', 'w').write('2')").files_changed == ("b.txt", "out/sub/a.txt")
    assert sb.run("print(open('b.txt').read())").files_changed == ()
    assert sb.run("open('b.txt', 'a').write('3')").files_changed == ("b.txt",)
    assert sb.run("import os\nos.remove('b.txt')").files_changed == ()
    assert not (sb.workdir / "b.txt").exists()
    assert (sb.workdir / "out/sub/a.txt").read_text() == "1"


def test_a_given_workdir_is_kept_and_a_temp_one_removed(tmp_path):
    mine = tmp_path / "work"
    box = Sandbox(workdir=mine)
    box.run("open('result.txt', 'w').write('done')")
    box.close()
    assert (mine / "result.txt").read_text() == "done"
    temp = Sandbox()
    path = temp.workdir
    temp.close()
    assert not path.exists()


def test_without_a_context_manager_close_is_idempotent_and_kills_everything():
    mark = marker()
    box = Sandbox(timeout=5)
    assert box.run(f"import threading, subprocess\n"
                   f"t = threading.Thread(target=lambda: subprocess.run(['sleep', '{mark}']))\n"
                   f"t.start()\nimport time\ntime.sleep(0.3)").ok
    box.close()
    box.close()
    assert_no_survivors(mark)
    with pytest.raises(SandboxClosed):
        box.run("print(1)")


def test_context_manager_closes_on_exit():
    with Sandbox() as box:
        assert box.run("1 + 1").stdout == "2\n"
    with pytest.raises(SandboxClosed):
        box.run("1")


def test_run_from_a_worker_thread_and_concurrent_callers_are_serialised(sb):
    sb.run("counter = 0")
    results = []

    def bump():
        results.append(sb.run("counter += 1\ncounter"))

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in results)
    assert sorted(int(r.stdout) for r in results) == list(range(1, 9))


def test_close_from_another_thread_ends_a_running_call(sb):
    done = {}
    thread = threading.Thread(target=lambda: done.setdefault("r", sb.run("import time\ntime.sleep(30)", timeout=30)))
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    sb.close()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 5
    assert done["r"].state_lost and done["r"].error


def test_non_persistent_sandbox_forgets_between_calls(make_sandbox):
    box = make_sandbox(persistent=False)
    assert box.run("x = 1\nopen('f.txt', 'w').write('kept')").ok
    r = box.run("print(open('f.txt').read())\nx")
    assert r.stdout == "kept\n" and "NameError" in r.error and not r.state_lost


def test_require_isolation_refuses_a_weaker_sandbox():
    with pytest.raises(IsolationUnavailable) as info:
        Sandbox(require_isolation=True, disable=["seccomp"])
    assert "seccomp" in str(info.value) and "seccomp" in info.value.missing


def test_require_isolation_runs_when_everything_is_in_force():
    probe = Sandbox()
    complete, missing = probe.isolation.complete, probe.isolation.missing()
    probe.close()
    if complete:
        with Sandbox(require_isolation=True) as box:
            assert box.run("print('strict')").stdout == "strict\n"
    else:
        with pytest.raises(IsolationUnavailable):
            Sandbox(require_isolation=True)
        assert missing


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError):
        Sandbox(timeout=0)
    with pytest.raises(ValueError):
        Sandbox(disable=["everything"])


def test_missing_input_file_is_a_start_error(tmp_path):
    with pytest.raises(sandbox.SandboxStartError):
        Sandbox(files=[tmp_path / "nope.txt"])


def test_the_worker_does_not_inherit_our_open_files(sb, tmp_path):
    private = open(tmp_path / "agent-private.txt", "w")
    try:
        r = sb.run("import os\nprint(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))")
        fds = json.loads(r.stdout)
        # stdio, the worker's private pipes (>= 100) and the fd listdir itself opened; nothing else
        assert len([fd for fd in fds if 3 <= fd < 100]) <= 1
    finally:
        private.close()
    assert os.path.exists(tmp_path / "agent-private.txt")


def test_network_true_keeps_the_host_network_and_says_so(make_sandbox):
    box = make_sandbox(network=True)
    iso = box.isolation
    assert iso.network_allowed and "net" not in iso.namespaces and iso.network.startswith("allowed")
    assert "net" not in " ".join(iso.missing())
    r = box.run("import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\nprint(s.getsockname()[0])")
    assert r.ok and r.stdout == "127.0.0.1\n"
