"""Checks shared by the sandbox tests: is it alive, is state kept, did anything survive."""

from __future__ import annotations

import os
import random
import time

from jsonagent.bundled import sandbox

Sandbox = sandbox.Sandbox


def assert_alive(box: Sandbox, state_kept: dict | None = None) -> None:
    """The next run works; optionally, variables from before are still there."""
    result = box.run("print('alive')")
    assert result.ok and result.stdout == "alive\n", result
    for name, value in (state_kept or {}).items():
        kept = box.run(f"print(repr({name}))")
        assert kept.ok and kept.stdout == repr(value) + "\n", kept


def assert_state_lost(box: Sandbox, name: str) -> None:
    result = box.run(f"{name}")
    assert "NameError" in (result.error or ""), result


def marker() -> str:
    """A unique `sleep` argument, so leftover processes can be found from the host."""
    return f"{random.randint(5000, 9000)}.{random.randint(10**8, 10**9 - 1)}"


def daemon_code(mark: str) -> str:
    """A setsid double-fork daemon, the classic way to outlive whoever started you."""
    return (
        "import os\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{mark}'])\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print('spawned')\n"
    )


def host_processes(mark: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if mark.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def assert_no_survivors(mark: str, within: float = 2.0) -> None:
    deadline = time.monotonic() + within
    while host_processes(mark):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes still alive: {host_processes(mark)}")
        time.sleep(0.02)


def limits_processes(box: Sandbox) -> bool:
    return bool({"NPROC", "PIDS"} & set(box.isolation.rlimits))
