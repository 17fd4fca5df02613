"""The first code to run in the child: enter namespaces, then become (or fork) the reaper.

The supervisor starts `python -I -c <bootstrap> <pkgdir> <config-json>`. The
bootstrap imports this module without running `sandbox/__init__.py`, so nothing
of the supervisor side is loaded into the sandbox.

With a pid namespace this process stays outside it, forks the reaper (pid 1
inside), and waits: its exit status is the reaper's. Without one, this process
is the reaper itself.
"""

from __future__ import annotations

import json
import os
import sys


def main(config_json: str) -> None:
    cfg = json.loads(config_json)
    warnings: list[str] = []
    namespaces: list[str] = []
    if cfg.get("pids_cgroup"):
        from . import cgroup
        if not cgroup.join(cfg["pids_cgroup"]):
            warnings.append("joining the pids cgroup failed")
            cfg["pids_cgroup"] = None
    if sys.platform.startswith("linux") and "namespaces" not in cfg["disable"]:
        from .isolation import enter_namespaces
        namespaces = enter_namespaces(cfg["network"], warnings)
    elif sys.platform.startswith("linux"):
        warnings.append("namespaces disabled by the caller")
    else:
        warnings.append(f"no kernel isolation on {sys.platform}")

    from . import reaper
    if "pid" not in namespaces:
        reaper.main(cfg, namespaces, warnings)
        return
    pid = os.fork()
    if pid == 0:
        from . import linux
        try:
            linux.prctl(linux.PR_SET_PDEATHSIG, 9)  # if this outer process is killed, the namespace dies
            reaper.main(cfg, namespaces, warnings)
        except BaseException:
            import traceback
            traceback.print_exc()  # the supervisor shows the last line as the start error
        os._exit(70)
    # Keep nothing the sandbox talks through: only the reaper should hold the pipes.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, 1 << 16)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            os._exit(70)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)
