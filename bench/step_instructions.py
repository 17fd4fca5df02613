"""Framework overhead per scripted step in CPU instructions, counted by valgrind's callgrind.

    python bench/step_instructions.py [ROOT ...]

Time per step (bench/overhead.py) swings by a third with the machine's load and clock; an
instruction count does not (repeats agree within about 2 %: run ids, timestamps), so it
tells whether a change made the step cheaper. ROOT is a checkout to measure (default: this
one); pass two to compare, say a `git worktree` of the last commit and this one. It runs 2
and then 12 ten-step runs and divides the difference, so start-up and imports cancel out.
Needs valgrind (apt install valgrind); under a minute a root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STEPS = 10
RUNS = (2, 12)

SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
from jsonagent import Agent, tool
from jsonagent.testing import ScriptedModel, step

@tool
def noop(n: int) -> int:
    '''Return n.'''
    return n

script = [step("noop", {"n": i}, "thinking about it") for i in range(STEPS - 1)]
script.append(step("TaskCompleteTool", {"output": "done"}))
for _ in range(int(sys.argv[2]) + 1):  # one more: the first run pays for lazy imports
    result = Agent(model=ScriptedModel(list(script)), tools=[noop], max_steps=STEPS).run("count")
    assert result.status == "completed", result.error
""".replace("STEPS", str(STEPS))


def instructions(root: Path, runs: int, script: Path, out: Path) -> int:
    # this interpreter itself (a venv's, with its packages), not a `python` shim script
    proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                           sys.executable, str(script), str(root), str(runs)],
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": "0"})  # the same dict layouts
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode or not found:
        sys.exit(f"error: the scripted runs failed under valgrind: {proc.stderr.strip()[-300:]}")
    return int(found.group(1))


def main() -> None:
    if shutil.which("valgrind") is None:
        sys.exit("error: valgrind is not installed (apt install valgrind)")
    roots = [Path(r).resolve() for r in sys.argv[1:]] or [Path(__file__).resolve().parent.parent]
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "steps.py"
        script.write_text(SCRIPT)
        for root in roots:
            if not (root / "jsonagent").is_dir():
                sys.exit(f"error: {root} holds no jsonagent package")
            few, many = (instructions(root, n, script, Path(tmp) / "cg.out") for n in RUNS)
            per_step = (many - few) / ((RUNS[1] - RUNS[0]) * STEPS)
            print(f"{str(root):<40} {per_step:12,.0f} instructions per scripted step")


if __name__ == "__main__":
    main()
