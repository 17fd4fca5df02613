"""Start llama-cpp-python's OpenAI-compatible server on 127.0.0.1 and always stop it.

Used by the end-to-end tests and by the benchmark runner:

    with LlamaServer(model_path) as server:
        OpenAIModel("local", base_url=server.base_url)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


try:  # the tests' port blocks, one per xdist worker (tests/ports.py)
    from ports import free_port
except ImportError:  # the benchmark runner, on its own
    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


class LlamaServer:
    """`python -m llama_cpp.server` in its own process group, with a readiness wait."""

    def __init__(self, model: str | os.PathLike[str], *, n_ctx: int = 8192, python: str = sys.executable,
                 log: str | os.PathLike[str] | None = None, ready_timeout: float = 180.0):
        self.model, self.n_ctx, self.python = Path(model), n_ctx, python
        self.log_path = Path(log) if log else None
        self.ready_timeout = ready_timeout
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "LlamaServer":
        threads = os.environ.get("JSONAGENT_THREADS") or str(os.cpu_count() or 1)
        command = [self.python, "-m", "llama_cpp.server", "--model", str(self.model),
                   "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                   "--n_threads", threads, "--n_threads_batch", threads, "--model_alias", "local"]
        self._log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=_die_with_parent)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with code {self.process.returncode}"
                                   + self._log_tail())
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                    if json.load(response).get("data"):
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.3)
        raise TimeoutError(f"llama_cpp.server not ready after {self.ready_timeout:.0f}s" + self._log_tail())

    def _log_tail(self) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        return ": " + " | ".join(lines[-5:])

    def stop(self) -> None:
        """SIGTERM to the whole process group, SIGKILL if it lingers."""
        if self.process is None or self.process.poll() is not None:
            self._close_log()
            return
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self._close_log()

    def _close_log(self) -> None:
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()
            self._log = None

    _log = None


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the process that started it dies. An xdist
    worker stopped by Ctrl-C may never reach its fixtures' teardown, and a server it leaves
    behind keeps a core spinning."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
