"""Hostile cells. Each test asserts what happened under the isolation actually in force,
then that the sandbox still answers."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import textwrap
import time
import uuid

import pytest

from probes import (assert_alive, assert_no_survivors, assert_state_lost, daemon_code,
                    limits_processes, marker)


def run(box, code, **kw):
    return box.run(textwrap.dedent(code), **kw)


# ---- time --------------------------------------------------------------------------------

def test_cpu_loop_is_interrupted_and_keeps_state(sb):
    r = run(sb, "x = 1\nwhile True: pass", timeout=0.4)
    assert r.timed_out and not r.state_lost and not r.crashed
    assert "KeyboardInterrupt" in r.error and "timeout" in r.error
    assert "worker.py" not in r.error  # the traceback shows the cell, not our machinery
    assert r.error.splitlines()[:3] == ["Traceback (most recent call last):",
                                        '  File "<cell 1>", line 2, in <module>',
                                        "    while True: pass"]
    assert_alive(sb, {"x": 1})


def test_sleep_is_interrupted_and_keeps_state(sb):
    r = run(sb, "import time\ny = 2\ntime.sleep(60)", timeout=0.4)
    assert r.timed_out and not r.state_lost and r.duration_s < 2
    assert_alive(sb, {"y": 2})


@pytest.mark.parametrize("defence", [
    "signal.signal(signal.SIGINT, signal.SIG_IGN)",
    "signal.signal(signal.SIGINT, lambda *a: None)",
    "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])",
])
def test_code_that_ignores_the_interrupt_is_killed(sb, defence):
    r = run(sb, f"import signal\nz = 3\n{defence}\nwhile True: pass", timeout=0.4)
    assert r.timed_out and r.state_lost and r.exit_code == -signal.SIGKILL
    assert "killed" in r.error
    assert_alive(sb)
    assert_state_lost(sb, "z")


def test_code_that_swallows_keyboardinterrupt_is_killed(sb):
    r = run(sb, """
        w = 4
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass
    """, timeout=0.4)
    assert r.timed_out and r.state_lost
    assert_alive(sb)
    assert_state_lost(sb, "w")


# ---- processes ---------------------------------------------------------------------------

def test_fork_bomb_is_bounded_and_cleaned_up(sb):
    mark = marker()
    r = run(sb, f"""
        import os
        limited = False
        for _ in range(100):          # at most 100 * 3 processes even with no limit at all
            try:
                pid = os.fork()
            except OSError:
                limited = True
                break
            if pid == 0:
                for _ in range(2):
                    try:
                        os.fork()
                    except OSError:
                        pass
                os.execv("/bin/sleep", ["sleep", "{mark}"])
        print("limited" if limited else "unlimited")
    """)
    assert r.ok, r
    assert r.stdout == ("limited\n" if limits_processes(sb) else "unlimited\n")
    assert_no_survivors(mark)
    assert_alive(sb)


def test_thread_bomb_is_bounded(sb):
    r = run(sb, """
        import threading
        release = threading.Event()
        started, limited = 0, False
        for _ in range(300):
            try:
                threading.Thread(target=release.wait, args=(10,), daemon=True).start()
                started += 1
            except RuntimeError:
                limited = True
                break
        print(limited)
    """)
    assert r.ok, r
    assert r.stdout == f"{limits_processes(sb)}\n"
    assert_alive(sb)
    assert run(sb, "release.set()").ok


def test_setsid_double_fork_daemon_does_not_outlive_the_call(sb):
    mark = marker()
    r = sb.run(daemon_code(mark))
    assert r.ok and r.stdout == "spawned\n"
    assert_no_survivors(mark)
    assert_alive(sb)


def test_background_subprocess_is_killed_at_end_of_call(sb):
    mark = marker()
    r = run(sb, f"import subprocess\np = subprocess.Popen(['sleep', '{mark}'])\nprint('started')")
    assert r.ok and r.stdout == "started\n"
    assert_no_survivors(mark)
    assert_alive(sb)


def test_daemon_is_killed_with_a_worker_that_ignores_the_interrupt(sb):
    mark = marker()
    r = run(sb, f"""
        import os, signal
        if os.fork() == 0:
            os.setsid()
            os.execv("/bin/sleep", ["sleep", "{mark}"])
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            pass
    """, timeout=0.4)
    assert r.timed_out and r.state_lost
    assert_no_survivors(mark)
    assert_alive(sb)


# ---- memory and crashes ------------------------------------------------------------------

def test_one_shot_memory_bomb_is_a_memory_error(sb):
    r = run(sb, "keep = 1\nb = bytearray(8 * 1024**3)")
    assert "MemoryError" in r.error and not r.crashed
    assert_alive(sb, {"keep": 1})


def test_gradual_memory_bomb_is_a_memory_error(sb):
    r = run(sb, """
        keep = 2
        def grow():
            chunks = []
            while True:
                chunks.append(bytearray(16 * 1024**2))
        grow()
    """)
    assert "MemoryError" in r.error and not r.crashed
    assert_alive(sb, {"keep": 2})


def test_shared_anonymous_mapping_counts_against_the_limit(sb):
    r = run(sb, "import mmap\nkeep = 3\nm = mmap.mmap(-1, 8 * 1024**3)")
    assert ("MemoryError" in r.error or "Cannot allocate memory" in r.error) and not r.crashed
    assert_alive(sb, {"keep": 3})


def test_deep_python_recursion_is_a_recursion_error(sb):
    r = run(sb, "keep = 4\ndef f(n):\n    return f(n + 1)\nf(0)")
    assert "RecursionError" in r.error and not r.crashed
    assert_alive(sb, {"keep": 4})


def test_c_stack_overflow_crashes_only_the_worker(sb):
    r = run(sb, """
        import sys
        sys.setrecursionlimit(10**8)
        nested = []
        for _ in range(2_000_000):
            nested = [nested]
        repr(nested)
    """, timeout=20)
    assert r.crashed and r.state_lost and r.exit_code == -signal.SIGSEGV, r
    assert_alive(sb)


def test_segfault_is_a_crash_and_the_worker_restarts(sb):
    r = run(sb, "x = 5\nprint('before', flush=True)\nimport ctypes\nctypes.string_at(0)")
    assert r.crashed and r.state_lost and r.exit_code == -signal.SIGSEGV
    assert r.stdout == "before\n"
    assert_alive(sb)
    assert_state_lost(sb, "x")


def test_os_exit_is_a_crash_with_its_status(sb):
    r = run(sb, "x = 6\nimport os\nprint('bye')\nos._exit(7)")
    assert r.crashed and r.state_lost and r.exit_code == 7 and r.stdout == "bye\n"
    assert_alive(sb)
    assert_state_lost(sb, "x")


def test_abort_is_a_crash(sb):
    r = run(sb, "import os\nos.abort()")
    assert r.crashed and r.exit_code == -signal.SIGABRT
    assert_alive(sb)


@pytest.mark.parametrize("call, code, error", [
    ("sys.exit(3)", 3, "SystemExit: 3"),
    ("sys.exit()", 0, None),
    ("sys.exit('bad input')", 1, "SystemExit: bad input"),
])
def test_sys_exit_is_a_result_and_keeps_state(sb, call, code, error):
    r = run(sb, f"import sys\nx = 8\n{call}")
    assert r.exit_code == code and r.error == error and not r.crashed and not r.state_lost
    assert_alive(sb, {"x": 8})


# ---- output and fds ----------------------------------------------------------------------

def test_huge_output_is_capped_but_counted(sb):
    r = run(sb, "import sys\nprint('x' * 5_000_000)\nn = sys.stderr.write('e' * 3_000_000)")
    assert r.ok
    assert r.stdout_truncated and r.stdout_bytes == 5_000_001 and len(r.stdout) == sb.output_limit
    assert r.stderr_truncated and r.stderr_bytes == 3_000_000 and len(r.stderr) == sb.output_limit
    assert_alive(sb)


def test_endless_output_is_stopped_by_the_timeout(sb):
    r = run(sb, "while True:\n    print('y' * 1000)", timeout=0.5)
    assert r.timed_out and r.stdout_truncated and r.stdout_bytes > sb.output_limit
    assert_alive(sb)


def test_binary_output_is_decoded_with_replacement(sb):
    r = run(sb, "import sys\nn = sys.stdout.buffer.write(bytes(range(256)))")
    assert r.ok and r.stdout_bytes == 256 and "\ufffd" in r.stdout
    assert r.stdout.startswith("\x00\x01\x02")
    assert_alive(sb)


def test_cap_never_splits_a_character(make_sandbox):
    box = make_sandbox(output_limit=1001)
    r = run(box, "print('é' * 5000)")
    assert r.stdout_truncated and r.stdout == "é" * 500 and "\ufffd" not in r.stdout
    assert_alive(box)


def test_closing_stdout_and_stderr_does_not_break_the_next_call(sb):
    r = run(sb, "import os, sys\nos.close(1)\nos.close(2)\nsys.stdout.close()\nx = 9")
    assert not r.crashed
    assert_alive(sb, {"x": 9})


def test_closing_every_fd_is_at_worst_a_crash(sb):
    r = run(sb, "import os\nos.closerange(0, 4096)")
    assert r.ok or (r.crashed and r.state_lost)
    assert_alive(sb)


def test_stdin_is_empty_and_closed(sb):
    r = run(sb, "import sys\nprint(repr(sys.stdin.read()))\ninput('n? ')")
    assert r.stdout == "''\nn? " and "EOFError" in r.error
    assert "Write the values into the code" in r.error  # what the model does next
    assert_alive(sb)


def test_too_many_open_files_is_an_error_not_a_crash(sb):
    r = run(sb, """
        import errno
        held = []
        try:
            while len(held) < 100_000:
                held.append(open("/dev/null"))
        except OSError as exc:
            print(exc.errno == errno.EMFILE, len(held) < 200)
        finally:
            for f in held:
                f.close()
    """)
    assert r.ok and r.stdout == "True True\n"
    assert_alive(sb)


# ---- secrets and the agent's own process -------------------------------------------------

def test_environment_is_an_allowlist(make_sandbox, monkeypatch):
    secret = f"sk-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("JSONAGENT_TEST_SECRET", secret)
    box = make_sandbox()
    r = run(box, "import os\nprint(sorted(os.environ.items()))")
    assert r.ok and secret not in r.stdout and "OPENAI_API_KEY" not in r.stdout
    env = dict(eval(r.stdout))
    assert env["HOME"] == str(box.workdir) and env["OMP_NUM_THREADS"] == "1"
    assert_alive(box)


def test_other_processes_environ_is_unreadable(sb):
    secret = f"tok-{uuid.uuid4().hex}"
    helper = subprocess.Popen(["sleep", "30"], env={"PATH": "/usr/bin:/bin", "HELPER_SECRET": secret})
    try:
        r = run(sb, f"""
            import glob
            seen, denied = [], 0
            for path in glob.glob('/proc/*/environ') + ['/proc/{helper.pid}/environ', '/proc/1/environ']:
                try:
                    with open(path, 'rb') as f:
                        seen.append(f.read().decode(errors='replace'))
                except OSError:
                    denied += 1
            print('\\n'.join(seen))
        """)
        assert r.ok and secret not in r.stdout
        if sb.isolation.fresh_proc:
            pids = run(sb, "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
            assert pids.stdout == "[1, 2]\n"   # the reaper and the worker, nothing of the host
    finally:
        helper.kill()
        helper.wait()
    assert_alive(sb)


def test_signalling_the_agent_process_fails(sb):
    received = []
    old = signal.signal(signal.SIGUSR1, lambda *a: received.append(1))
    try:
        r = run(sb, f"import os, signal\nos.kill({os.getpid()}, signal.SIGUSR1)")
        assert r.error and ("ProcessLookupError" in r.error or "PermissionError" in r.error)
        assert received == []
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert_alive(sb)


def test_kill_everything_reaches_only_the_sandbox(sb):
    iso = sb.isolation
    if "pid" not in iso.namespaces and not iso.landlock_scoped:
        pytest.skip("UNPROTECTED here: without a pid namespace or Landlock scoping, kill(-1) would "
                    "reach every process of this user, so it is not run")
    received = []
    old = signal.signal(signal.SIGUSR1, lambda *a: received.append(1))
    try:
        r = run(sb, "import os, signal\ntry:\n    os.kill(-1, signal.SIGUSR1)\nexcept OSError:\n    pass\nx = 1")
        assert received == [] and not r.crashed
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert_alive(sb, {"x": 1})


def test_reaper_cannot_be_inspected(sb):
    r = run(sb, """
        for path in ('/proc/1/mem', '/proc/1/environ', '/proc/1/fd/0', '/proc/1/root/etc/hostname'):
            try:
                open(path, 'rb').read(1)
                print('READ', path)
            except OSError:
                pass
    """)
    assert r.ok and "READ" not in r.stdout
    assert_alive(sb)


# ---- files -------------------------------------------------------------------------------

def test_writing_outside_the_workdir_is_denied(sb, tmp_path):
    target = f"/tmp/jsonagent-escape-{uuid.uuid4().hex}"
    r = run(sb, f"open({target!r}, 'w').write('pwned')")
    if sb.isolation.landlock_abi:
        assert "PermissionError" in r.error
        assert not os.path.exists(target)
    else:
        assert os.path.exists(target)  # UNPROTECTED without Landlock
        os.unlink(target)
    assert_alive(sb)


def test_deleting_outside_the_workdir_is_denied(sb, tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    os.chmod(tmp_path, 0o777)
    r = run(sb, f"import os\nos.remove({str(victim)!r})")
    if sb.isolation.landlock_abi:
        assert "PermissionError" in r.error and victim.read_text() == "keep me"
    assert_alive(sb)


def test_symlink_to_a_host_file_cannot_be_followed_or_exported(sb, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    r = run(sb, f"""
        import os
        os.symlink({str(secret)!r}, 'link')
        try:
            print(open('link').read())
        except OSError as exc:
            print(type(exc).__name__)
    """)
    if sb.isolation.landlock_abi:
        assert r.stdout == "PermissionError\n"
    assert "link" not in r.files_changed
    if sb.isolation.disk_quota_mb:
        assert not os.path.lexists(sb.workdir / "link")  # symlinks never leave the sandbox
    assert_alive(sb)


def test_another_sessions_workdir_is_unreadable(make_sandbox):
    a, b = make_sandbox(), make_sandbox()
    assert run(a, "open('secret.txt', 'w').write('session a')").files_changed == ("secret.txt",)
    assert (a.workdir / "secret.txt").read_text() == "session a"
    r = run(b, f"print(open({str(a.workdir / 'secret.txt')!r}).read())")
    if b.isolation.landlock_abi:
        assert r.error and "session a" not in r.stdout
    assert_alive(b)


def test_filling_the_disk_with_small_files_hits_the_quota(sb):
    r = run(sb, """
        import errno
        written = 0
        try:
            for i in range(400):                  # 400 MB if nothing stops it
                with open(f'fill{i}.bin', 'wb') as f:
                    f.write(b'x' * (1 << 20))
                written += 1
        except OSError as exc:
            print(exc.errno == errno.ENOSPC, written)
    """)
    if sb.isolation.disk_quota_mb:
        ok, count = r.stdout.split()
        assert ok == "True" and int(count) <= sb.limits.disk_mb
        total = sum(p.stat().st_size for p in sb.workdir.iterdir() if p.is_file())
        assert total <= sb.limits.disk_mb * 1024 * 1024
    assert_alive(sb)
    assert run(sb, "import glob, os\nfor p in glob.glob('fill*'): os.remove(p)").ok


def test_a_flood_of_empty_files_hits_the_inode_cap(sb):
    r = run(sb, """
        import errno
        made = 0
        try:
            for i in range(5000):
                open(f'e{i}', 'w').close()
                made += 1
        except OSError as exc:
            print(exc.errno == errno.ENOSPC)
    """)
    if sb.isolation.disk_quota_mb:
        assert r.stdout == "True\n"
        assert len(r.files_changed) <= sb.limits.max_files
    assert_alive(sb)


# ---- network -----------------------------------------------------------------------------

def test_cannot_reach_a_listener_on_localhost(sb):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        r = run(sb, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')")
        assert r.error and "connected" not in r.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert_alive(sb)


def test_cannot_reach_a_host_abstract_unix_socket(sb):
    name = f"\0jsonagent-test-{uuid.uuid4().hex}"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(name)
    listener.listen(1)
    listener.setblocking(False)
    try:
        r = run(sb, f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({name!r})\nprint('connected')")
        assert r.error and "connected" not in r.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert_alive(sb)


def test_dns_fails_fast(sb):
    r = run(sb, "import socket\nsocket.getaddrinfo('example.com', 443)")
    assert "gaierror" in r.error or "PermissionError" in r.error
    assert r.duration_s < 3
    assert_alive(sb)


# ---- kernel attack surface ---------------------------------------------------------------

def test_nested_namespaces_are_refused(sb):
    r = run(sb, """
        import ctypes, os, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        print(libc.unshare(0x10000000), ctypes.get_errno())          # CLONE_NEWUSER
        print(subprocess.run(['unshare', '-Ur', 'true']).returncode != 0)
    """)
    if sb.isolation.seccomp:
        assert r.stdout == f"-1 {errno.EPERM}\nTrue\n"
    assert_alive(sb)


def test_ptrace_is_refused(sb):
    r = run(sb, """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        print(libc.ptrace(16, 1, None, None), ctypes.get_errno())    # PTRACE_ATTACH to the reaper
    """)
    if sb.isolation.seccomp:
        assert r.stdout == f"-1 {errno.EPERM}\n"
    else:
        assert r.stdout.startswith("-1 ")  # the reaper is not dumpable
    assert_alive(sb)


# ---- forged protocol ---------------------------------------------------------------------

_FIND_PIPES = """
import os, stat, json, struct
def control_pipes():
    fds = []
    for fd in range(3, 256):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISFIFO(st.st_mode) and os.get_blocking(fd) is not None:
            fds.append(fd)
    return fds
def forge(payload):
    for fd in control_pipes():
        try:
            os.write(fd, payload)
        except OSError:
            pass
"""


@pytest.mark.parametrize("payload", [
    "b'\\xff\\xff\\xff\\xffgarbage'",
    "struct.pack('>I', 5) + b'{nope'",
    "(lambda b: struct.pack('>I', len(b)) + b)(b'[1, 2, 3]')",
    "(lambda b: struct.pack('>I', len(b)) + b)(json.dumps({'op': 'result', 'id': 999, 'exit_code': 0}).encode())",
    "(lambda b: struct.pack('>I', len(b)) + b)(json.dumps({'op': 'result', 'id': 1, 'exit_code': 'zero'}).encode())",
])
def test_forged_protocol_bytes_are_a_crash(sb, payload):
    r = sb.run(_FIND_PIPES + f"x = 1\nforge({payload})\nimport time\ntime.sleep(0.2)")
    assert r.crashed and r.state_lost and "protocol violation" in r.error, r
    assert_alive(sb)
    assert_state_lost(sb, "x")


def test_junk_written_after_the_call_is_caught_on_the_next_one(sb):
    r = sb.run(_FIND_PIPES + textwrap.dedent("""
        import threading, time
        x = 1
        def later():
            time.sleep(0.2)
            forge(b'\\x00\\x00\\x00\\x02{}')
        threading.Thread(target=later, daemon=True).start()
    """))
    assert r.ok
    time.sleep(0.5)
    nxt = run(sb, "print('fresh')")
    assert nxt.state_lost and nxt.ok and nxt.stdout == "fresh\n"
    assert_state_lost(sb, "x")


def test_killing_its_own_process_group_hits_only_the_worker(sb):
    r = run(sb, "import os, signal\nx = 1\nos.kill(0, signal.SIGKILL)")
    assert r.crashed and r.state_lost and r.exit_code == -signal.SIGKILL
    assert_alive(sb)
    assert_state_lost(sb, "x")
