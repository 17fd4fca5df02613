"""Weaker isolation, on purpose: each protection can be switched off, and the sandbox must say
so, keep working, and keep every guarantee the remaining layers still give."""

from __future__ import annotations

import os
import subprocess
import uuid
import warnings

import pytest

from probes import assert_alive, assert_no_survivors, daemon_code, marker
from jsonagent.bundled import sandbox

IsolationWarning, Sandbox = sandbox.IsolationWarning, sandbox.Sandbox


@pytest.fixture
def no_namespaces():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IsolationWarning)
        box = Sandbox(timeout=5, disable=["namespaces"])
    yield box
    box.close()


def test_weaker_isolation_warns_once_per_level():
    with pytest.warns(IsolationWarning, match="missing: .*capabilities") as caught:
        Sandbox(disable=["capabilities", "rlimits"]).close()
        Sandbox(disable=["capabilities", "rlimits"]).close()
    assert len([w for w in caught if issubclass(w.category, IsolationWarning)]) == 1


def test_missing_namespaces_are_reported(no_namespaces):
    iso = no_namespaces.isolation
    assert iso.namespaces == () and not iso.complete
    assert any(m.startswith("namespaces") for m in iso.missing())
    assert iso.process_cleanup.startswith("child subreaper")
    assert iso.disk_quota_mb is None and "disk quota" in iso.missing()
    assert "NONE" in iso.describe()


def test_without_a_pid_namespace_daemons_are_still_reaped(no_namespaces):
    mark = marker()
    r = no_namespaces.run(daemon_code(mark))
    assert r.ok and r.stdout == "spawned\n"
    assert_no_survivors(mark)
    assert_alive(no_namespaces)


def test_without_a_pid_namespace_other_environs_stay_unreadable(no_namespaces):
    secret = f"tok-{uuid.uuid4().hex}"
    helper = subprocess.Popen(["sleep", "30"], env={"PATH": "/usr/bin:/bin", "HELPER_SECRET": secret})
    try:
        r = no_namespaces.run(f"print(open('/proc/{helper.pid}/environ').read())")
        if no_namespaces.isolation.landlock_abi:
            assert "PermissionError" in r.error and secret not in r.stdout
        else:
            assert secret in r.stdout  # UNPROTECTED: same user, no Landlock, no pid namespace
    finally:
        helper.kill()
        helper.wait()
    assert_alive(no_namespaces)


def test_without_a_tmpfs_files_land_directly_in_the_workdir(no_namespaces):
    r = no_namespaces.run("open('direct.txt', 'w').write('hi')")
    assert r.files_changed == ("direct.txt",)
    assert (no_namespaces.workdir / "direct.txt").read_text() == "hi"


def test_timeouts_still_work_without_namespaces(no_namespaces):
    r = no_namespaces.run("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass",
                          timeout=0.4)
    assert r.timed_out and r.state_lost
    assert_alive(no_namespaces)


def test_with_every_protection_off_it_still_runs_and_says_so():
    with pytest.warns(IsolationWarning):
        box = Sandbox(timeout=5, disable=["namespaces", "landlock", "seccomp", "rlimits", "capabilities"])
    try:
        iso = box.isolation
        assert iso.landlock_abi == 0 and not iso.seccomp and iso.rlimits == {} and iso.network == "NOT blocked"
        assert len(iso.missing()) >= 5
        r = box.run("import os\nprint(os.environ.get('OPENAI_API_KEY'))")
        assert r.stdout == "None\n"  # the environment allowlist does not depend on the kernel
    finally:
        box.close()
    assert not os.path.exists(box.workdir)
