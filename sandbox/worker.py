"""The worker: confine itself, then exec cells in one persistent `__main__` namespace.

Everything after the `hello` frame runs alongside user code in this process, so the
supervisor trusts none of it; this loop only has to be correct for honest cells.
It restores what a cell may have broken (fds 1 and 2, sys.stdout, the SIGINT
handler) before answering, so one bad cell does not spoil the next.
"""

from __future__ import annotations

import ast
import builtins
import fcntl
import io
import linecache
import os
import signal
import sys
import traceback
import types

from . import protocol

_KEEP_FD_FLOOR = 100  # private duplicates live above the fds user code usually touches


class Worker:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.error_limit = max(4096, cfg["output_limit"])
        fds = cfg["fds"]
        self.cmd = fcntl.fcntl(fds["cmd"], fcntl.F_DUPFD_CLOEXEC, _KEEP_FD_FLOOR)
        self.res = fcntl.fcntl(fds["res"], fcntl.F_DUPFD_CLOEXEC, _KEEP_FD_FLOOR)
        self.saved_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, _KEEP_FD_FLOOR)
        self.saved_err = fcntl.fcntl(2, fcntl.F_DUPFD_CLOEXEC, _KEEP_FD_FLOOR)
        self.stdout = self.stderr = None
        self.in_cell = False
        self.module = types.ModuleType("__main__")
        self.module.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = self.module
        builtins.input = _no_input

    def restore_streams(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        for saved, fd in ((self.saved_out, 1), (self.saved_err, 2)):
            try:
                os.dup2(saved, fd)
            except OSError:
                pass
        if self.stdout is None or self.stdout.closed:
            self.stdout = _text_stream(1)
        if self.stderr is None or self.stderr.closed:
            self.stderr = _text_stream(2)
        sys.stdout, sys.stderr = self.stdout, self.stderr
        sys.__stdout__, sys.__stderr__ = self.stdout, self.stderr
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame) -> None:
        if self.in_cell:
            raise KeyboardInterrupt

    def run_cell(self, code: str, number: int) -> dict:
        """Returns the result frame's fields; catches everything the cell can raise."""
        try:
            return self._run_cell(code, number)
        except KeyboardInterrupt:  # an interrupt that raced with the end of the cell
            self.in_cell = False
            return {"error": "KeyboardInterrupt", "exit_code": 1, "interrupted": True}

    def _run_cell(self, code: str, number: int) -> dict:
        filename = f"<cell {number}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        _reap_children()
        self.restore_streams()
        result = {"error": None, "exit_code": 0, "interrupted": False}
        try:
            self.in_cell = True
            tree = ast.parse(code, filename)
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            namespace = self.module.__dict__
            exec(compile(tree, filename, "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
                if value is not None:
                    print(repr(value))  # like a REPL: show the last expression's value
            self.in_cell = False
        except SystemExit as exc:
            self.in_cell = False
            code_ = exc.code
            if code_ is None or isinstance(code_, int):
                result["exit_code"] = code_ or 0
            else:
                print(code_, file=sys.stderr)
                result["exit_code"] = 1
            if result["exit_code"]:
                result["error"] = f"SystemExit: {exc.code}"
        except BaseException as exc:
            self.in_cell = False
            result["exit_code"] = 1
            result["interrupted"] = isinstance(exc, KeyboardInterrupt)
            result["error"] = self._format(exc, filename)
        finally:
            self.in_cell = False
        self.restore_streams()
        return result

    def _format(self, exc: BaseException, filename: str) -> str:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != filename:
            tb = tb.tb_next  # hide the worker's own frames
        try:
            report = traceback.TracebackException(type(exc), exc, tb)
            # the interrupt handler's frame sits below the cell's: it is ours, not the cell's
            report.stack = traceback.StackSummary.from_list(
                [f for f in report.stack if f.filename != __file__])
            text = "".join(report.format())
        except Exception:  # a hostile __str__ or a broken traceback
            text = f"{type(exc).__name__}: <unprintable>"
        if len(text) > self.error_limit:
            text = "...(traceback truncated)...\n" + text[-self.error_limit:]
        return text

    def serve(self, hello: dict) -> None:
        protocol.write_all(self.res, protocol.encode(hello))
        while True:
            message = protocol.read_frame_blocking(self.cmd)
            if message is None or message.get("op") != "exec":
                os._exit(0)
            reply = self.run_cell(str(message.get("code", "")), int(message.get("id", 0)))
            reply.update(op="result", id=message.get("id"))
            protocol.write_all(self.res, protocol.encode(reply))


def main(cfg: dict, namespaces: list[str], shm: bool) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    os.setpgid(0, 0)  # kill(0, ...) in a cell reaches the cell's own processes, not the reaper
    if sys.platform.startswith("linux"):
        from . import linux
        linux.prctl(linux.PR_SET_PDEATHSIG, 9)
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")  # under memory pressure, the sandbox goes before the agent
        except OSError:
            pass
    worker = Worker(cfg)
    keep = sorted({0, 1, 2, worker.cmd, worker.res, worker.saved_out, worker.saved_err})
    for low, high in zip(keep, keep[1:]):
        os.closerange(low + 1, high)  # nothing of the reaper's or the supervisor's leaks in
    os.closerange(keep[-1] + 1, 1 << 16)

    warnings: list[str] = []
    confined: dict = {"rlimits": {}, "landlock": None, "seccomp": False, "caps_dropped": False}
    root = cfg["workdir"]
    os.chdir(root)
    if sys.platform.startswith("linux"):
        from .isolation import confine
        from .limits import Limits
        confined = confine(root, cfg["memory_mb"], Limits(**cfg["limits"]), cfg["network"],
                           set(cfg["disable"]), shm, "user" in namespaces, cfg["host_uid"], warnings)
    else:
        from .limits import Limits, apply
        confined["rlimits"] = apply(Limits(**cfg["limits"]), cfg["memory_mb"])
    sys.path[:] = [root] + [p for p in sys.path if p]  # like Jupyter: the workdir is importable
    worker.serve({"op": "hello", **confined, "warnings": warnings})


def _no_input(prompt: object = "") -> str:
    # stdin is empty: plain input() says only "EOF when reading a line", and small models
    # took that for a person's bad answer and asked again
    print(prompt, end="")
    raise EOFError("input() has nothing to read: nobody types into this interpreter. "
                   "Write the values into the code instead")


def _text_stream(fd: int) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


def _reap_children() -> None:
    """Collect children the reaper killed after the last cell, so they stop counting toward NPROC."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
