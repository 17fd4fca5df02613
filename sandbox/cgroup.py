"""A pids cgroup, used only when the agent runs as root.

The kernel never applies RLIMIT_NPROC to the global root user, even inside a user
namespace, so as root a fork bomb would be bounded by nothing. Root can, however,
create a cgroup with `pids.max`. The supervisor creates one per worker tree, the
boot process joins it before anything else, and the supervisor removes it after
the tree has exited. Without root (the common case) RLIMIT_NPROC does the job.
"""

from __future__ import annotations

import os
import time
import uuid


def create(limit: int) -> str | None:
    """A new pids cgroup holding at most `limit` tasks; None when not root or unsupported."""
    if os.geteuid() != 0:
        return None
    parent = _own_pids_group()
    if parent is None:
        return None
    path = os.path.join(parent, f"jsonagent-sandbox-{uuid.uuid4().hex[:12]}")
    try:
        os.mkdir(path)
        with open(os.path.join(path, "pids.max"), "w") as f:
            f.write(str(limit))
    except OSError:
        remove(path)
        return None
    return path


def join(path: str) -> bool:
    """Move the calling process into the group (its future children follow)."""
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        return True
    except OSError:
        return False


def remove(path: str | None) -> None:
    if not path:
        return
    for _ in range(50):  # the last tasks may take a moment to leave after their exit
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.005)


def _own_pids_group() -> str | None:
    """The directory of our own cgroup in a hierarchy that has the pids controller."""
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
        with open("/proc/self/cgroup") as f:
            memberships = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for fields in mounts:
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[-1].split(",")
        mountpoint = fields[4]
        if fstype == "cgroup" and "pids" in options:
            for _, controllers, group in memberships:
                if "pids" in controllers.split(","):
                    return os.path.join(mountpoint, group.lstrip("/"))
    for fields in mounts:
        sep = fields.index("-")
        if fields[sep + 1] == "cgroup2":
            for hier, _, group in memberships:
                if hier == "0":
                    path = os.path.join(fields[4], group.lstrip("/"))
                    try:
                        with open(os.path.join(path, "cgroup.subtree_control")) as f:
                            if "pids" in f.read().split():
                                return path
                    except OSError:
                        pass
    return None
