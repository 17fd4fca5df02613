"""Tools that take long, one of each kind, for the cancel tests (library, server, CLI, bench).

Each sleeps until an epoch deadline given in its arguments, or until the test releases it
(a `release` file beside the specs; `SlowHttp.release`), so that a test can cancel a run
mid-tool and then see a next run complete. Each leaves a mark when it starts. `payer` is a
`once` tool that keeps the keys it was called with, as a payment API's ledger does.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

HERE = Path(__file__).parent
DEMO_MCP = HERE / "mcp_servers" / "demo_server.py"

SLOW_COMMAND = '''
import os, subprocess, sys, time
until, marks, release = float(sys.argv[1]), sys.argv[2], sys.argv[3]
child = subprocess.Popen(["sleep", "120"])  # a grandchild: the whole group must go
with open(marks + ".part", "w") as f:  # renamed whole: a reader never sees it half written
    f.write(f"{os.getpid()} {child.pid}")
os.rename(marks + ".part", marks)
while time.time() < until and not os.path.exists(release):
    time.sleep(0.02)
child.kill()
print("slept")
'''

PY_TOOLS = '''
import os, time

def ignore(until):
    """Sleeps, and never looks at the cancel token."""
    open(MARK, "w").close()
    while time.time() < until and not os.path.exists(RELEASE):
        time.sleep(0.02)
    return "slept"
'''


def write(tmp: Path, http_port: int | None = None) -> Path:
    """The slow tools' spec file (and what it runs) in `tmp`; returns the spec file."""
    (tmp / "slow_command.py").write_text(SLOW_COMMAND)
    (tmp / "slowtools.py").write_text(f"MARK = {str(tmp / 'python.started')!r}\n"
                                      f"RELEASE = {str(tmp / 'release')!r}\n" + PY_TOOLS)
    until = [{"name": "until", "type": "number", "description": "epoch seconds"}]
    specs = [
        {"name": "slow_command", "parameters": until,
         "handler": {"command": [sys.executable, str(tmp / "slow_command.py"), "{until}",
                                 str(tmp / "command.pids"), str(tmp / "release")],
                     "timeout": 300}},
        {"name": "slow_python", "parameters": until, "handler": "slowtools:ignore"},
    ]
    if http_port is not None:
        specs.append({"name": "slow_http", "parameters": until, "handler": {"http": {
            "url": f"http://127.0.0.1:{http_port}/slow", "query": {"until": "{until}"},
            "timeout": 300}}})
    path = tmp / "slow_tools.json"
    path.write_text(json.dumps(specs))
    return path


def mcp_command(tmp: Path) -> list[str]:
    return [sys.executable, str(DEMO_MCP), "--pid-file", str(tmp / "mcp.pid")]


class SlowHttp:
    """A local API that answers /slow?until=T only at T, and notes when a client hangs up."""

    def __init__(self) -> None:
        self.hung_up = threading.Event()
        self.release = threading.Event()
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                until = float(parse_qs(urlsplit(self.path).query)["until"][0])
                if self.wait(until):
                    self.answer(b'"slept"')

            def do_POST(self):  # an OpenAI-compatible endpoint that takes its time
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.wait(time.time() + 600):
                    self.answer(json.dumps({
                        "id": "x", "object": "chat.completion", "created": 0, "model": "slow",
                        "choices": [{"index": 0, "finish_reason": "stop", "message": {
                            "role": "assistant", "content": "{}"}}]}).encode())

            def wait(self, until: float) -> bool:
                """Until `until` or the release; False when the client hung up first."""
                outer.requests += 1
                while time.time() < until and not outer.release.is_set():
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    if readable and not self.connection.recv(1, socket.MSG_PEEK):
                        outer.hung_up.set()  # the client closed the connection
                        return False
                return True

            def answer(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if alive(child):
                found.append(child)
                todo.append(child)
    return found


def sandboxes(pid: int) -> list[int]:
    """The sandbox processes below `pid`."""
    found = []
    for child in descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"sandbox.boot" in f.read():
                    found.append(child)
        except OSError:
            pass
    return found


def started(kind: str, tmp: Path, http: SlowHttp, pid: int) -> bool:
    """The slow tool of `kind`, run by process `pid` (for the code interpreter), runs now."""
    if kind == "command":
        return (tmp / "command.pids").exists()
    if kind == "python":
        return (tmp / "python.started").exists()
    if kind == "http":
        return http.requests > 0
    if kind == "mcp":
        return (tmp / "mcp.pid.sleeping").exists()
    return bool(sandboxes(pid))


def command_pids(tmp: Path) -> list[int]:
    return [int(p) for p in (tmp / "command.pids").read_text().split()]


def wait_for(predicate, timeout: float = 20.0, every: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())


def gone(pids, timeout: float = 3.0) -> bool:
    return wait_for(lambda: not any(alive(p) for p in pids), timeout)


__all__ = ["SlowHttp", "alive", "command_pids", "descendants", "gone", "mcp_command",
           "sandboxes", "started", "wait_for", "write"]


def ctrl_c_once_written(args: list, out, lines: int) -> subprocess.CompletedProcess:
    """`jsonagent ARGS` until `out` has `lines` lines, then Ctrl-C as a terminal sends it (to
    the whole foreground group); its exit and what it printed. Killed if it hangs."""
    proc = subprocess.Popen([sys.executable, "-m", "jsonagent", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists()
                                               or out.read_text().count("\n") < lines):
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


def payer(tmp: Path, nap: float = 0) -> tuple[Path, Path]:
    """A `once` tool spec, `pay`, in `tmp` whose handler writes its idempotency key to a
    ledger file (a payment API's record) then naps `nap` seconds; the ledger and the spec."""
    ledger = tmp / "ledger.txt"
    (tmp / "payer.py").write_text(
        "import time\nfrom jsonagent.calls import current_key\n\n"
        f"def pay(amount):\n    with open({str(ledger)!r}, 'a') as f:\n"
        f"        f.write(current_key() + '\\n')\n    time.sleep({nap})\n    return 'paid'\n")
    spec = tmp / "pay.json"
    spec.write_text(json.dumps([{"name": "pay", "description": "Pays.", "handler": "payer:pay",
                                 "effects": "once",
                                 "parameters": [{"name": "amount", "type": "integer"}]}]))
    return ledger, spec


def ray_left_behind(temp: str, wait: float = 20) -> list[int]:
    """The processes of a Ray that ran under RAY_TMPDIR=`temp` still alive after `wait`
    seconds; they are killed, and their pids returned for the test to complain about."""
    def alive() -> list[int]:
        out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        return [int(line.split()[0]) for line in out.splitlines() if temp in line]

    deadline = time.monotonic() + wait
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = alive()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left
