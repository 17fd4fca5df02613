"""One worker tree as the supervisor sees it: the processes, their pipes and the poll loop.

Four private pipes: commands to and results from the worker, commands to and
reports from the reaper. The worker's stdout and stderr are two more pipes, drained
concurrently with everything else by one poll loop, so no pipe can fill up and
stall the other side. Every byte from the worker is untrusted: anything that is not
the one expected frame ends the worker, and the call reports a crash.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Protocol

from . import cgroup, protocol
from .capture import Capture
from .errors import SandboxStartError
from .limits import Limits
from .result import IsolationReport, report_from_hellos

_PKG_DIR = str(Path(__file__).resolve().parent)
# The child loads this package from its directory under a private name: its modules import
# one another relatively, so any name serves, and this one leaves `sandbox` free for the code
# it runs (it may have a package of that name installed).
_BOOTSTRAP = ("import sys,types;p=types.ModuleType('_jsonagent_sandbox');p.__path__=[sys.argv[1]];"
              "sys.modules['_jsonagent_sandbox']=p;from _jsonagent_sandbox.boot import main;"
              "main(sys.argv[2])")
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "RAYON_NUM_THREADS")
_STARTUP_TIMEOUT = 30.0
_REAPER_TIMEOUT = 30.0   # a cleanup may mirror up to `disk_mb` of files


class Settings(Protocol):
    """What a worker tree reads from its `Sandbox`, named here so this module needs no import
    of the supervisor, which imports it."""

    workdir: Path
    memory_mb: int
    network: bool
    output_limit: int
    limits: Limits
    disable: frozenset[str]


class WorkerSession:
    """One boot/reaper/worker tree and the poll loop that talks to it."""

    def __init__(self, box: Settings) -> None:
        self.box = box
        self.out = self.err = Capture(box.output_limit)
        self.call_id = 0
        self.worker_frames: deque = deque()
        self.reaper_frames: deque = deque()
        self.exit_event: dict | None = None
        self.violation: str | None = None
        self.dead = False
        self.pending: dict[int, bytearray] = {}
        self.proc: subprocess.Popen | None = None
        self.fds: list[int] = []
        self.cgroup: str | None = None

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> IsolationReport:
        box = self.box
        cmd_r, self.cmd = os.pipe()
        self.res, res_w = os.pipe()
        rcmd_r, self.rcmd = os.pipe()
        self.rres, rres_w = os.pipe()
        child_fds = (cmd_r, res_w, rcmd_r, rres_w)
        if os.geteuid() == 0 and "rlimits" not in box.disable:
            self.cgroup = cgroup.create(box.limits.nproc + 4)  # + boot, reaper, worker
        self.fds = [self.cmd, self.res, self.rcmd, self.rres]
        cfg = {
            "workdir": str(box.workdir), "memory_mb": box.memory_mb, "network": box.network,
            "limits": box.limits.to_dict(), "disable": sorted(box.disable),
            "output_limit": box.output_limit, "host_uid": os.getuid(),
            "pids_cgroup": self.cgroup,
            "fds": {"cmd": cmd_r, "res": res_w, "rcmd": rcmd_r, "rres": rres_w},
        }
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-u", "-B", "-X", "utf8", "-c", _BOOTSTRAP, _PKG_DIR, json.dumps(cfg)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=child_fds, start_new_session=True, close_fds=True,
                env=_environment(box.workdir), cwd=str(box.workdir))
        except OSError as exc:
            raise SandboxStartError(f"cannot start the sandbox interpreter: {exc}") from None
        finally:
            for fd in child_fds:
                os.close(fd)
        self.stdout_fd, self.stderr_fd = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        self.poller = select.poll()
        self.reads = {self.stdout_fd, self.stderr_fd, self.res, self.rres}
        for fd in self.reads:
            os.set_blocking(fd, False)
            self.poller.register(fd, select.POLLIN)
        for fd in (self.cmd, self.rcmd):
            os.set_blocking(fd, False)
        self.worker_reader = protocol.FrameReader(4 * box.output_limit + (4 << 20))
        self.reaper_reader = protocol.FrameReader(64 << 20)

        self.send(self.rcmd, {"op": "hello"})
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        reaper_hello = worker_hello = None
        while reaper_hello is None or worker_hello is None:
            if self.reaper_frames:
                reaper_hello = self.reaper_frames.popleft()
            if self.worker_frames:
                worker_hello = self.worker_frames.popleft()
            if self.violation or self.dead or self.exit_event:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if reaper_hello is None or worker_hello is None:
                self.pump(left)
        if reaper_hello is None or worker_hello is None or worker_hello.get("op") != "hello":
            detail = self.err.text().strip().splitlines()
            reason = detail[-1] if detail else (self.violation or "no hello from the worker")
            raise SandboxStartError(f"sandbox worker failed to start: {reason}")
        return report_from_hellos(reaper_hello, worker_hello, box.network, box.limits.nproc)

    def healthy(self) -> bool:
        self.pump(0)
        return not (self.dead or self.exit_event or self.violation
                    or self.worker_frames or self.worker_reader.pending)

    def close(self) -> None:
        """Normal teardown: EOF on the reaper's pipe makes it kill everything and exit."""
        if self.proc is None:  # never started
            for fd in self.fds:
                _close(fd)
            self.fds = []
            cgroup.remove(self.cgroup)
            return
        for fd in self.fds:
            _close(fd)
        self.fds = []
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.hard_kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()
        self.proc = None
        cgroup.remove(self.cgroup)

    def hard_kill(self) -> None:
        """SIGKILL the boot process; the reaper's parent-death signal takes the namespace down."""
        proc = self.proc
        if proc is not None and proc.returncode is None:
            try:
                proc.send_signal(signal.SIGKILL)
            except OSError:
                pass

    # ---- one call ----------------------------------------------------------------------
    def execute(self, code: str, timeout: float, grace: float) -> dict:
        box = self.box
        self.out, self.err = Capture(box.output_limit), Capture(box.output_limit)
        self.call_id += 1
        started = time.monotonic()
        self.send(self.cmd, {"op": "exec", "id": self.call_id, "code": code})
        deadline, interrupted, reply = started + timeout, False, None
        while reply is None and not (self.violation or self.dead or self.exit_event):
            if self.worker_frames:
                reply = self._check_reply(self.worker_frames.popleft())
                continue
            now = time.monotonic()
            if now >= deadline:
                if interrupted:
                    break
                self.send(self.rcmd, {"op": "interrupt"})
                interrupted, deadline = True, now + grace
                continue
            self.pump(deadline - now)

        result: dict = {"timed_out": interrupted}
        if reply is not None:
            cleanup = self._reaper_request({"op": "cleanup"}, "cleanup")
            self._drain()
            result.update(error=reply["error"], exit_code=reply["exit_code"])
            if interrupted:
                result["error"] = ((reply["error"] or "").rstrip() + f"\nTimeoutError: the code ran past the "
                                   f"{timeout:g} s timeout and was interrupted; variables are kept")
            if cleanup is not None:
                result["files_changed"] = cleanup["files"]
            else:  # the worker died right after answering
                result.update(crashed=True, ended=True, files_changed=self._exit_files())
        else:
            if self.violation:
                result.update(crashed=True, exit_code=-signal.SIGKILL,
                              error=f"worker crashed: protocol violation ({self.violation})")
            elif self.exit_event or self.dead:
                code_ = self.exit_event.get("exit_code") if self.exit_event else None
                result.update(crashed=True, exit_code=code_, error=f"worker crashed: {_describe_exit(code_)}")
            else:
                result.update(exit_code=-signal.SIGKILL,
                              error=f"TimeoutError: the code ran past the {timeout:g} s timeout, ignored the "
                                    f"interrupt for {grace:g} s and was killed; variables are lost")
            if not self.exit_event and not self.dead:
                self._reaper_request({"op": "kill"}, None)
            result.update(ended=True, files_changed=self._exit_files())
            self._drain(final=True)
        result.update(
            stdout=self.out.text(), stderr=self.err.text(),
            stdout_truncated=self.out.truncated, stderr_truncated=self.err.truncated,
            stdout_bytes=self.out.total, stderr_bytes=self.err.total,
            duration_s=round(time.monotonic() - started, 6))
        result["files_changed"] = tuple(result.get("files_changed") or ())
        return result

    def _check_reply(self, frame: dict) -> dict | None:
        try:
            protocol.expect(frame, {"op": str, "id": int, "exit_code": int})
            if frame["op"] != "result" or frame["id"] != self.call_id:
                raise protocol.ProtocolViolation("unexpected frame")
            if frame.get("error") is not None and not isinstance(frame["error"], str):
                raise protocol.ProtocolViolation("error is not text")
        except protocol.ProtocolViolation as exc:
            self.violation = str(exc)
            return None
        return {"error": frame.get("error"), "exit_code": frame["exit_code"]}

    def _reaper_request(self, message: dict, reply_op: str | None) -> dict | None:
        """Send to the reaper and wait for its reply (or its exit event); None if it ended."""
        self.send(self.rcmd, message)
        deadline = time.monotonic() + _REAPER_TIMEOUT
        while not (self.exit_event or self.dead):
            while self.reaper_frames:
                frame = self.reaper_frames.popleft()
                if frame.get("op") == reply_op and isinstance(frame.get("files"), list):
                    return frame
            left = deadline - time.monotonic()
            if left <= 0:
                self.hard_kill()
                self.dead = True
                break
            self.pump(left)
        return None

    def _exit_files(self) -> list[str]:
        files = (self.exit_event or {}).get("files")
        return [f for f in files if isinstance(f, str)] if isinstance(files, list) else []

    def _drain(self, final: bool = False) -> None:
        """Collect output already written; once the tree is gone, read to EOF (bounded)."""
        if not final:
            for _ in range(10_000):
                if not self.pump(0):
                    break
            return
        deadline = time.monotonic() + 1.0
        while self.stdout_fd in self.reads or self.stderr_fd in self.reads:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.pump(left)

    # ---- the poll loop -----------------------------------------------------------------
    def send(self, fd: int, message: dict) -> None:
        if fd not in self.fds:
            return
        buf = self.pending.setdefault(fd, bytearray())
        was_empty = not buf
        buf += protocol.encode(message)
        if was_empty:
            self._flush(fd)

    def _flush(self, fd: int) -> None:
        buf = self.pending.get(fd)
        try:
            while buf:
                del buf[:os.write(fd, buf)]
        except BlockingIOError:
            pass
        except OSError:  # the reader is gone; the exit will be noticed on the other pipes
            buf.clear()
        try:
            if buf:
                self.poller.register(fd, select.POLLOUT)
            else:
                self.poller.unregister(fd)
        except (KeyError, ValueError):
            pass

    def pump(self, timeout: float) -> int:
        """Wait up to `timeout` s for any pipe, move whatever is ready; returns the event count."""
        try:
            events = self.poller.poll(max(0, int(timeout * 1000 + 0.999)))
        except InterruptedError:
            return 0
        for fd, mask in events:
            if fd in (self.cmd, self.rcmd):
                self._flush(fd)
                continue
            chunk = self._read(fd)
            if fd == self.stdout_fd:
                self.out.add(chunk)
            elif fd == self.stderr_fd:
                self.err.add(chunk)
            elif fd == self.res:
                if self.violation is None:
                    try:
                        self.worker_frames.extend(self.worker_reader.feed(chunk))
                    except protocol.ProtocolViolation as exc:
                        self.violation = str(exc)
            elif fd == self.rres:
                try:
                    for frame in self.reaper_reader.feed(chunk):
                        if frame.get("op") == "exit":
                            self.exit_event = frame
                        else:
                            self.reaper_frames.append(frame)
                except protocol.ProtocolViolation:
                    self.dead = True
                if fd not in self.reads:
                    self.dead = True
        return len(events)

    def _read(self, fd: int) -> bytes:
        chunks, total = [], 0
        while total < (1 << 20):
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.reads.discard(fd)
                try:
                    self.poller.unregister(fd)
                except (KeyError, ValueError):
                    pass
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)


def _environment(workdir: Path) -> dict[str, str]:
    """An allowlist, never a copy of ours: the agent's API keys must not reach the code."""
    lang = os.environ.get("LANG", "")
    env = {
        "PATH": os.pathsep.join(dict.fromkeys([os.path.dirname(sys.executable), "/usr/local/bin",
                                               "/usr/bin", "/bin"])),
        "LANG": lang if re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", lang) else "C.UTF-8",
        "HOME": str(workdir),
        "TMPDIR": str(workdir / ".tmp"),
        "MPLBACKEND": "Agg",
        "MALLOC_ARENA_MAX": "2",
    }
    env.update({name: "1" for name in _THREAD_VARS})
    return env


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker vanished"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
