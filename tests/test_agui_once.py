"""A `once` call over AG-UI, on a real `jsonagent serve` (issue 58, findings 3 and 5): a run
stopped inside one (its client gone, a cancel) waits for a person; the interrupt carries a
responseSchema (happened, again, fail), a resume entry answers it, and the payment, whose
ledger keeps every idempotency key it was sent, is made once."""

from __future__ import annotations

import json
import time

from test_agui_edges import body, post
from test_server import DONE, serve  # noqa: F401  (the fixture)
from jsonagent.testing import step

PAY = step("pay", {"amount": 3}, "pay")
PAYER = '''
import os, time
from jsonagent.calls import current_key


def pay(amount):
    with open(LEDGER, "a") as ledger:  # the payment API took it, under its key
        ledger.write(current_key() + "\\n")
    end = time.monotonic() + 60
    while time.monotonic() < end and not os.path.exists(RELEASE):  # its answer is slow
        time.sleep(0.02)
    return "paid"
'''


def _payer(tmp_path):
    ledger, release = tmp_path / "ledger.txt", tmp_path / "release"
    (tmp_path / "payer.py").write_text(f"LEDGER = {str(ledger)!r}\n"
                                       f"RELEASE = {str(release)!r}\n" + PAYER)
    spec = tmp_path / "pay.json"
    spec.write_text(json.dumps([{"name": "pay", "description": "Pays.", "handler": "payer:pay",
                                 "effects": "once",
                                 "parameters": [{"name": "amount", "type": "integer"}]}]))
    return ledger, release, spec


def _paid(ledger, timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while not (ledger.exists() and ledger.read_text()):
        assert time.monotonic() < deadline, "the payment never started"
        time.sleep(0.05)
    return ledger.read_text().split()


def _interrupt(server, thread: str) -> dict:
    """The thread's open interrupt, as the same input sent again (a reconnect) offers it."""
    _, events = post(server, body(thread, text=None))
    assert events[-1]["type"] == "RUN_FINISHED", events[-3:]
    assert events[-1]["outcome"]["type"] == "interrupt", events[-1]
    [item] = events[-1]["outcome"]["interrupts"]
    return item


def _answer(server, thread: str, item: dict, payload: dict) -> list[dict]:
    _, events = post(server, body(thread, text=None, resume=[
        {"interruptId": item["id"], "status": "resolved", "payload": payload}]))
    return events


def test_a_client_gone_mid_once_call_leaves_an_interrupt_that_resume_answers(serve, tmp_path):
    ledger, release, spec = _payer(tmp_path)
    server = serve([PAY, DONE], "--tools", str(spec))
    run_id = None
    with server.client as c, c.stream("POST", "/ag-ui", json=body("pays", "pay 3")) as r:
        for line in r.iter_lines():  # until the call is stored, then the payment is under way
            event = json.loads(line[5:]) if line.startswith("data:") else {}
            run_id = event.get("runId") or run_id
            if event.get("type") == "TOOL_CALL_END":
                break
        [key] = _paid(ledger)
    # the client went away inside the call: it is not told it failed, nor run again unasked
    waiting = server.wait(run_id, "requires_action", "cancelled", "completed", timeout=40)
    assert waiting["status"] == "requires_action", waiting
    assert waiting["required_action"] == {"kind": "once", "tool": "pay",
                                          "args": {"amount": 3}, "key": key}
    item = _interrupt(server, "pays")
    assert item["reason"] == "once" and "Did it happen?" in item["message"]
    events = _answer(server, "pays", item, {"answer": "happened"})
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    release.touch()
    assert ledger.read_text().split() == [key]  # paid once
    done = server.get(run_id)
    assert done["status"] == "completed"
    assert "went through" in done["steps"][0]["observation"]["note"]


def test_a_once_pending_is_an_interrupt_with_a_response_schema_and_again_keeps_the_key(
        serve, tmp_path):
    """The pending that broke AG-UI (KeyError: 'once'): a run cancelled inside the call."""
    ledger, release, spec = _payer(tmp_path)
    server = serve([PAY, DONE], "--tools", str(spec))
    run_id = server.create(input="pay 3", session="bills")["id"]
    [key] = _paid(ledger)
    with server.client as c:
        assert c.post(f"/v1/runs/{run_id}/cancel").status_code == 202
    server.wait(run_id, "requires_action")
    item = _interrupt(server, "bills")
    assert item["reason"] == "once" and item["toolCallId"] == f"{run_id}.1.0"
    assert item["metadata"]["pending"] == {"kind": "once", "tool": "pay", "args": {"amount": 3},
                                           "key": key}
    schema = item["responseSchema"]
    assert schema["required"] == ["answer"]
    assert schema["properties"]["answer"]["enum"] == ["happened", "again", "fail"]
    events = _answer(server, "bills", item, {"answer": "maybe"})  # does not fit: left waiting
    assert [e["type"] for e in events] == ["RUN_ERROR"] and "responseSchema" in events[0]["message"]
    assert server.get(run_id)["status"] == "requires_action"
    release.touch()  # the API answers at once this time
    events = _answer(server, "bills", item, {"answer": "again", "reason": "no record of it"})
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == "42", events[-3:]
    assert ledger.read_text().split() == [key, key]  # sent again under its key: charged once
    assert server.get(run_id)["steps"][0]["observation"] == "paid"
    assert "Traceback" not in server.output()
