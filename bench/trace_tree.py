"""One traced run, printed as the span tree the tests' OTLP receiver got: `jsonagent run --otel`
with a scripted model (a tool call, an invalid reply and its re-ask, a failing tool, the
answer), exported over OTLP/HTTP to a receiver on 127.0.0.1.

    python bench/trace_tree.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from otlp_receiver import OtlpReceiver  # noqa: E402

from jsonagent.testing import step  # noqa: E402

SCRIPT = [step("GetTimeTools", {"timezone": "UTC"}, "what time is it"),
          "this is not JSON",
          step("GetTimeTools", {"timezone": "Nowhere/Nothing"}, "and there?"),
          step("TaskCompleteTool", {"output": "It is late."}, "done")]


def main() -> None:
    with OtlpReceiver() as otlp, tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps(SCRIPT))
        env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url, JSONAGENT_HOME=tmp)
        subprocess.run([sys.executable, "-m", "jsonagent", "run", "--otel", "--no-store",
                        "--model", f"scripted:{script}", "What time is it?"],
                       env=env, check=True, capture_output=True, timeout=60)
        otlp.wait_for(lambda spans: any(s.name.startswith("invoke_agent") for s in spans))
        print(otlp.tree().replace(str(script), "script.json"))


if __name__ == "__main__":
    main()
