"""A command's process (tools/handlers.py): it dies with us, and its whole group is killed,
so no grandchild it started outlives the call."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Callable


def dies_with_us() -> Callable[[], None] | None:
    """For the child, between fork and exec: be killed when we die, even by kill -9, so that
    a resumed run never finds the old command still writing (Linux; a no-op elsewhere).
    Everything is looked up here, in the parent: the child only makes the one call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def child() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # we died before that took hold
            os._exit(1)

    return child


def kill_group(proc: subprocess.Popen, wait: bool = True) -> None:
    """Kill the process group the command leads, so a grandchild it started dies with it;
    `wait`: then wait for the command (5 s at most), so no zombie is left."""
    kill_pgid(proc.pid)
    if wait:
        try:
            proc.communicate(timeout=5)
        except Exception:
            pass


def kill_pgid(pgid: int | None) -> None:
    """SIGKILL to the process group `pgid` leads, if it is still there."""
    if pgid is None:
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:  # gone already, or never ours
        pass
