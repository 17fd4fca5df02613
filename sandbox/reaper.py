"""The reaper: pid 1 of the sandbox's pid namespace, and the only trusted process inside.

It never runs user code. It forks the worker, then answers the supervisor on its
own pipe pair, which the worker does not hold:

    hello      -> what the namespaces and mounts achieved
    interrupt  -> SIGINT to the worker (first stage of a timeout)
    cleanup    -> kill every process except the worker, mirror the workdir, list changed files
    kill       -> kill everything, mirror the workdir, report, exit (the namespace dies with us)

When the worker dies on its own, the reaper sends an unsolicited `exit` event and
exits. When the supervisor goes away (EOF on the command pipe), it exits too, so
nothing outlives the agent.

Without a pid namespace the reaper is a child subreaper instead, and finds the
leftovers by walking /proc for its descendants.
"""

from __future__ import annotations

import os
import select
import signal
import sys

from . import protocol, workdir

_OOM_FIRST = "1000"


class Reaper:
    def __init__(self, cfg: dict, namespaces: list[str], warnings: list[str]) -> None:
        self.cfg = cfg
        self.fds = cfg["fds"]
        self.namespaces = namespaces
        self.warnings = warnings
        self.pid_ns = "pid" in namespaces
        self.root = cfg["workdir"]
        self.mounts = {"host_fd": None, "quota_mb": None, "fresh_proc": False, "shm": False}
        self.root_fd = -1
        self.worker = -1
        self.worker_status: int | None = None
        self.baseline: workdir.Snapshot = {}

    # ---- setup -------------------------------------------------------------------------
    def prepare(self) -> None:
        limits = self.cfg["limits"]
        if "mount" in self.namespaces:
            from .isolation import mount_private
            self.mounts = mount_private(self.root, limits["disk_mb"], limits["max_files"],
                                        self.pid_ns, self.warnings)
        if "uts" in self.namespaces:
            from . import linux
            try:
                linux.sethostname("sandbox")
            except OSError:
                pass
        self.root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if self.mounts["host_fd"] is not None:
            host = workdir.snapshot(self.mounts["host_fd"], limits["max_files"])
            changed, _ = workdir.changes({}, host)
            problems = workdir.mirror(self.mounts["host_fd"], self.root_fd, changed, [], host)
            self.warnings += [f"copying into the workdir: {p}" for p in problems[:5]]
        try:
            os.mkdir(workdir.SCRATCH, 0o700, dir_fd=self.root_fd)
        except FileExistsError:
            pass
        self.baseline = workdir.snapshot(self.root_fd, limits["max_files"])
        if sys.platform.startswith("linux"):
            from . import linux
            linux.prctl(linux.PR_SET_DUMPABLE, 0)  # no /proc/1/mem, environ or fd for the worker
            if not self.pid_ns:
                linux.prctl(linux.PR_SET_CHILD_SUBREAPER, 1)

    def spawn_worker(self) -> None:
        pid = os.fork()
        if pid == 0:
            try:
                from . import worker
                os.close(self.fds["rcmd"])
                os.close(self.fds["rres"])
                if self.mounts["host_fd"] is not None:
                    os.close(self.mounts["host_fd"])
                os.close(self.root_fd)
                worker.main(self.cfg, self.namespaces, self.mounts["shm"])
            except BaseException:
                import traceback
                traceback.print_exc()
            os._exit(70)
        self.worker = pid
        os.close(self.fds["cmd"])
        os.close(self.fds["res"])
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)

    # ---- processes ---------------------------------------------------------------------
    def _others(self) -> list[int]:
        """Live processes the code started (everything but us and the worker)."""
        if self.pid_ns:
            candidates = [int(p) for p in os.listdir("/proc") if p.isdigit()]
            return [p for p in candidates if p not in (1, self.worker) and not _is_zombie(p)]
        children: dict[int, list[int]] = {}
        for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
            if name.isdigit():
                stat = _stat(int(name))
                if stat and stat[0] != "Z":
                    children.setdefault(stat[1], []).append(int(name))
        found, stack = [], [os.getpid()]
        while stack:
            for child in children.get(stack.pop(), ()):
                if child != self.worker:
                    found.append(child)
                stack.append(child)
        return found

    def kill_others(self) -> int:
        killed = 0
        for _ in range(200):
            pids = self._others()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except OSError:
                    pass
            self.reap()
        return killed

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.worker:
                self.worker_status = os.waitstatus_to_exitcode(status)

    # ---- files -------------------------------------------------------------------------
    def sync(self) -> tuple[list[str], list[str]]:
        after = workdir.snapshot(self.root_fd, self.cfg["limits"]["max_files"] + 16)
        changed, removed = workdir.changes(self.baseline, after)
        problems = []
        if self.mounts["host_fd"] is not None:
            problems = workdir.mirror(self.root_fd, self.mounts["host_fd"], changed, removed, after)
        self.baseline = after
        return [p for p in changed if after[p][0] == "f"], problems

    # ---- conversation ------------------------------------------------------------------
    def send(self, message: dict) -> None:
        protocol.write_all(self.fds["rres"], protocol.encode(message))

    def finish(self, reason: str) -> None:
        """Kill everything, mirror files, report, and exit: the namespace ends with us."""
        if self.worker_status is None:
            try:
                os.kill(self.worker, signal.SIGKILL)
            except OSError:
                pass
        self.kill_others()
        while self.worker_status is None:
            try:
                _, status = os.waitpid(self.worker, 0)
                self.worker_status = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                self.worker_status = -9
        self.kill_others()
        files, problems = self.sync() if reason != "eof" else ([], [])
        if reason != "eof":
            try:
                self.send({"op": "exit", "reason": reason, "exit_code": self.worker_status,
                           "files": files, "problems": problems})
            except OSError:
                pass
        os._exit(0)

    def serve(self) -> None:
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        poller = select.poll()
        poller.register(self.fds["rcmd"], select.POLLIN)
        poller.register(wake_r, select.POLLIN)
        self.reap()
        while True:
            if self.worker_status is not None:
                self.finish("worker exited")
            for fd, _ in poller.poll():
                if fd == wake_r:
                    try:
                        os.read(wake_r, 4096)
                    except BlockingIOError:
                        pass
                    self.reap()
                elif fd == self.fds["rcmd"]:
                    self.handle(protocol.read_frame_blocking(self.fds["rcmd"]))

    def handle(self, message: dict | None) -> None:
        op = None if message is None else message.get("op")
        if op is None:
            self.finish("eof")
        elif op == "hello":
            self.send({"op": "hello", "namespaces": self.namespaces,
                       "fresh_proc": self.mounts["fresh_proc"], "quota_mb": self.mounts["quota_mb"],
                       "cleanup": "pid namespace" if self.pid_ns else "child subreaper + /proc walk",
                       "pids_cgroup": bool(self.cfg.get("pids_cgroup")),
                       "warnings": self.warnings})
        elif op == "interrupt":
            try:
                os.kill(self.worker, signal.SIGINT)
            except OSError:
                pass
        elif op == "cleanup":
            killed = self.kill_others()
            self.reap()
            if self.worker_status is not None:
                self.finish("worker exited")
            files, problems = self.sync()
            self.send({"op": "cleanup", "killed": killed, "files": files, "problems": problems})
        elif op == "kill":
            self.finish("killed")


def main(cfg: dict, namespaces: list[str], warnings: list[str]) -> None:
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the poll through the wakeup fd
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # supervisor gone: just die
    reaper = Reaper(cfg, namespaces, warnings)
    reaper.prepare()
    reaper.spawn_worker()
    reaper.serve()


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def _is_zombie(pid: int) -> bool:
    stat = _stat(pid)
    return stat is None or stat[0] in ("Z", "X")
