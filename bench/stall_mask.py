"""Words or a mask: which breaks a loop better, in schema mode on a local model?

    flock /tmp/jsonagent-bench.lock python bench/stall_mask.py --tasks time-days-to-new-year ...

Both arms run stall detection as the package ships it: at the `stall_after`-th repeat the model
is told plainly that it repeats itself, and once more ends the run `stalled`. The "mask" arm
also removes the repeated tool from the next step's grammar (its alternative in the response
schema), so the model cannot make that call again right after the warning. A loop counts as
broken when a run got the warning and did not end stalled. The mask goes into the package
only if it breaks more loops than the words alone.

The default tasks are the eight that ended `stalled` in the 24-task run with the 1.5B in
process (bench/results/qwen2.5-coder-1.5b-instruct-q4/round2/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from run_tasks import model_path, run_jsonagent  # noqa: E402
from tasks import TASKS  # noqa: E402

from jsonagent import read_journal  # noqa: E402

LOOPED = ["time-plus-100-days", "time-days-to-new-year", "time-day-of-year", "code-primes",
          "human-product", "multi-weekday-in-1000-days", "multi-minutes-to-midnight",
          "recover-old-zone-name"]
WARNING = "You are repeating yourself"


class Masking:
    """Wraps a model: after a stall warning, the warned tool leaves the next step's schema."""

    default_json_mode = "schema"

    def __init__(self, model):
        self.model, self.name = model, model.name
        self.masked: list[str] = []

    def complete(self, messages, response_format, **kw):
        tool = _warned_tool(messages)
        if tool and response_format and response_format.get("type") == "json_schema":
            schema = json.loads(json.dumps(response_format["json_schema"]["schema"]))
            kept = [a for a in schema["anyOf"] if a["properties"]["tool_name"].get("const") != tool]
            if kept and len(kept) < len(schema["anyOf"]):
                schema["anyOf"] = kept
                response_format = {**response_format,
                                   "json_schema": {**response_format["json_schema"], "schema": schema}}
                self.masked.append(tool)
        return self.model.complete(messages, response_format, **kw)


def _warned_tool(messages) -> str | None:
    last = messages[-1]["content"] if messages else ""
    try:
        body = json.loads(last)
    except (ValueError, TypeError):
        return None
    if isinstance(body, dict) and str(body.get("note", "")).startswith(WARNING):
        return body.get("tool_name")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--tasks", nargs="*", default=LOOPED)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "stall_mask")
    args = parser.parse_args()
    from jsonagent.models.local import LocalConfig, LocalModel

    gguf = model_path(args.model)
    model = LocalModel(gguf, LocalConfig(n_ctx=args.n_ctx, max_tokens=1024))
    transcripts = args.out / "transcripts"
    transcripts.mkdir(parents=True, exist_ok=True)
    rows = []
    print("| task | arm | status | ok | steps | warned | loop broken | masked |")
    print("|---|---|---|---|---|---|---|---|")
    for task in [t for t in TASKS if t.id in args.tasks]:
        for arm in ("words", "mask"):
            runner = Masking(model) if arm == "mask" else model
            record = run_jsonagent(task, runner, "schema", arm, args.max_steps, transcripts)
            events = read_journal(transcripts / f"{arm}-{task.id}.jsonl")
            warned = any(e.type == "tool_result" and (e.note or "").startswith(WARNING) for e in events)
            record |= {"arm": arm, "warned": warned, "broken": warned and record["status"] != "stalled",
                       "masked": getattr(runner, "masked", [])}
            rows.append(record)
            print(f"| {task.id} | {arm} | {record['status']} | {'yes' if record['success'] else 'no'} "
                  f"| {record['steps']} | {warned} | {record['broken']} | {','.join(record['masked'])} |",
                  flush=True)
    model.close()
    for arm in ("words", "mask"):
        rs = [r for r in rows if r["arm"] == arm]
        print(f"{arm}: warned {sum(r['warned'] for r in rs)}, loops broken "
              f"{sum(r['broken'] for r in rs)}, stalled {sum(r['status'] == 'stalled' for r in rs)}, "
              f"succeeded {sum(r['success'] for r in rs)}/{len(rs)}")
    (args.out / "RESULTS.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
