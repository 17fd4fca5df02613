"""The payment API of bench/chaos.py, on 127.0.0.1 in the bench's process (tests/http_fakes.py's
FakeAPI): it applies each Idempotency-Key once, answers a key it has seen with the first
response (as payment APIs do), and records every attempt, with the node life that sent it
(the X-Chaos-Node header, which the tools' spec fills from the node's environment)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from http_fakes import FakeAPI


@dataclass
class Attempt:
    key: str
    tool: str
    node: str
    applied: bool
    start: float
    end: float = 0.0  # when the answer went out (to nobody, if the node died meanwhile)


class Ledger:
    """The payment API. It answers after `delay` seconds, as a slow API would, so that kills
    land in the middle of calls; a key is applied when its request arrives."""

    def __init__(self, delay: float):
        self.delay, self.attempts, self.first = delay, [], {}
        self.lock = threading.Lock()
        self.api = FakeAPI({"/": self.route})

    def route(self, req) -> tuple:
        key = req.headers.get("idempotency-key", "")
        with self.lock:
            applied = key not in self.first
            if applied:
                self.first[key] = {"id": f"ch_{len(self.first)}", "key": key, "ok": True}
            attempt = Attempt(key, req.path.strip("/"), req.headers.get("x-chaos-node", "?"),
                              applied, time.time())
            self.attempts.append(attempt)
        time.sleep(self.delay)
        attempt.end = time.time()
        return 200, self.first[key], {} if applied else {"Idempotent-Replayed": "true"}

    def applied(self, key: str) -> bool:
        with self.lock:
            return key in self.first

    def specs(self, path: Path) -> Path:
        header = {"X-Chaos-Node": "${env:CHAOS_NODE}"}  # which node life sent the call
        path.write_text(json.dumps([
            {"name": "pay", "description": "Charge the card.", "effects": "once",
             "parameters": [{"name": "amount", "type": "integer"}],
             "handler": {"http": {"method": "POST", "url": self.api.url + "/pay",
                                  "headers": header}}},
            {"name": "reserve", "description": "Hold an item.", "effects": "idempotent",
             "parameters": [{"name": "item", "type": "string"}],
             "handler": {"http": {"method": "PUT", "url": self.api.url + "/reserve",
                                  "headers": header}}}]))
        return path
