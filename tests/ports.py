"""Free TCP ports on 127.0.0.1 for the servers the tests start (jsonagent serve, PostgreSQL,
llama.cpp, MCP), safe when pytest-xdist runs the suite in several workers.

A port from `bind(("127.0.0.1", 0))` is free only until the socket closes: two workers could
be handed the same one before either server binds it, and a readiness check would then find
the other worker's server. Under xdist each worker (`PYTEST_XDIST_WORKER=gwN`) therefore takes
ports from a block of its own, below Linux's ephemeral range (32768-60999) so that no port the
kernel hands to a client socket or to another bind(0) is among them, and walks through its block
so that a port is not handed out twice in a run. Outside xdist it is the plain bind(0).
"""

from __future__ import annotations

import itertools
import os
import socket

BASE, BLOCK = 20000, 500  # 24 workers fit below 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _worker_index() -> int | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


_next = itertools.count(os.getpid() % BLOCK)  # two suites at once start apart


def free_port() -> int:
    index = _worker_index()
    if index is None or index >= (32768 - BASE) // BLOCK:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    start = BASE + index * BLOCK
    for _ in range(BLOCK):
        port = start + next(_next) % BLOCK
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port in {start}-{start + BLOCK - 1}")
