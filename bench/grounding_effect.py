"""What the grounding check (issue 37, item 3) did in an eval's runs: read from their traces.

    python bench/grounding_effect.py bench/results/qwen2.5-coder-1.5b-instruct-q4/round7-*/results.jsonl

A nudge is a TaskCompleteTool step whose observation is the check's (with `unconfirmed`).
For each nudged run it applies the task's own checker to the answer that was nudged:
- a false nudge: that answer was right (the check held back a right answer);
- a catch: it was wrong; a catch turned into a success when the run then passed.

Seconds it cost: the run's seconds times its share of steps from the nudge on (the trace
keeps no times per step). A task whose checker's verdict depends on the clock cannot be judged
afterwards (the run's clock readings are not kept), so its nudges count as undecided.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from tasks import TASKS, Clock  # noqa: E402
from tasks.embedding import answer_text  # noqa: E402

BY_ID = {t.id: t for t in TASKS}
CLOCKS = [Clock(t, t) for t in (datetime(1970, 1, 1, tzinfo=timezone.utc),
                                 datetime.now(timezone.utc))]


def nudges(trace: list[dict]) -> list[int]:
    """Indexes of the steps the check nudged."""
    return [i for i, s in enumerate(trace) if s.get("tool") == "TaskCompleteTool"
            and isinstance(s.get("observation"), dict) and "unconfirmed" in s["observation"]]


def judge(task, answer) -> bool | None:
    """Whether the nudged answer was right; None when the checker's verdict depends on the
    clock (the run's readings are not kept): it is asked at two far-apart clocks."""
    text = answer_text(answer["output"] if isinstance(answer, dict) and set(answer) == {"output"}
                       else answer)
    verdicts = {bool(task.check(text, clock)) for clock in CLOCKS}
    return verdicts.pop() if len(verdicts) == 1 else None


def main(paths: list[str]) -> None:
    rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            extra, trace = r["extra"], r["extra"].get("trace") or []
            row = rows[extra["variant"]]
            row["runs"] += 1
            found = nudges(trace)
            if not found:
                continue
            first = found[0]
            row["nudged runs"] += 1
            row["nudges"] += len(found)
            row["seconds"] += r["seconds"] * (len(trace) - first) / max(len(trace), 1)
            right = judge(BY_ID[extra["case"]], trace[first].get("args") or {})
            passed = extra["verdict"] == "pass"
            kind = ("undecided" if right is None else "false nudges" if right else "catches")
            row[kind] += 1
            if right is False and passed:
                row["catches turned into successes"] += 1
            if right and not passed:
                row["false nudges that cost the task"] += 1
            print(f"{extra['variant']:>22} {extra['case']:<24} nudged answer "
                  f"{'?' if right is None else 'right' if right else 'wrong'}, "
                  f"run {extra['verdict']}: {json.dumps(trace[first].get('args'))[:90]}")
    keys = ["runs", "nudged runs", "nudges", "catches", "catches turned into successes",
            "false nudges", "false nudges that cost the task", "undecided", "seconds"]
    print()
    print(f"{'variant':>22} " + " ".join(f"{k[:14]:>14}" for k in keys))
    for name, row in rows.items():
        print(f"{name:>22} " + " ".join(f"{row[k]:>14.0f}" for k in keys))
    print("\nseconds: estimated from each nudged run's share of steps from the nudge on")


if __name__ == "__main__":
    main(sys.argv[1:])
