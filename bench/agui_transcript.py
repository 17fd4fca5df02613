"""The AG-UI events of one run with an interrupt, as the official client received them:
a real `jsonagent serve` with a scripted model (a question, then the answer), driven by
@ag-ui/client in Node (tests/agui_client/drive.mjs, scenario "question"). Writes
bench/results/agui/question_interrupt.json (every event) and .txt (one line an event).

    PYTHONPATH=. python bench/agui_transcript.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_server import ASK, Server  # noqa: E402
from jsonagent.testing import step  # noqa: E402

OUT = ROOT / "bench" / "results" / "agui"
KEEP = ("stepName", "messageId", "toolCallId", "toolCallName", "delta", "content", "outcome",
        "result", "message", "snapshot", "runId", "threadId")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["JSONAGENT_HOME"] = tmp
        server = Server(Path(tmp), [step("GetTimeTools", {"timezone": "UTC"}, "check the time"),
                                    ASK, step("TaskCompleteTool", {"output": "Lyon, at noon"},
                                              "answer with the city")]).start()
        try:
            args = {"url": server.url + "/ag-ui", "scenario": "question", "thread": "demo",
                    "input": "Where should we meet, and when?", "answer": "Lyon"}
            out = subprocess.run(["node", str(ROOT / "tests/agui_client/drive.mjs"),
                                  json.dumps(args)], capture_output=True, text=True, check=True)
        finally:
            server.kill()
    data = json.loads(out.stdout.strip().splitlines()[-1])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "question_interrupt.json").write_text(json.dumps(data["runs"][:2], indent=1) + "\n")
    lines = []
    for n, run in enumerate(data["runs"][:2], 1):
        lines.append(f"# AG-UI run {n} of thread demo")
        for e in run["events"]:
            shown = {k: e[k] for k in KEEP if k in e}
            lines.append(f"{e['type']:<26} {json.dumps(shown, ensure_ascii=False)}")
    (OUT / "question_interrupt.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
