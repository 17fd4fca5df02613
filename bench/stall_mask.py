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

import eval_tasks  # noqa: E402
from jsonagent.evals import Variant  # noqa: E402

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
    from jsonagent.models import catalog

    gguf = str(catalog.path(args.model) if args.model in catalog.CATALOG else Path(args.model))
    args.out.mkdir(parents=True, exist_ok=True)
    masks: dict[str, Masking] = {}

    def wrap(model, variant):  # both arms share the one local model (eval_tasks.model_for)
        return masks.setdefault("mask", Masking(model)) if variant.name == "mask" else model

    build = eval_tasks.factory(gguf, None, args.max_steps, args.n_ctx, wrap=wrap)
    eval_tasks.VARIANTS.update(words=eval_tasks.VARIANTS["local"], mask=eval_tasks.VARIANTS["local"])

    def warned(run) -> bool:  # a loop is broken when the run was warned and did not end stalled
        return any(str(s.get("note", "")).startswith(WARNING) for s in run.trace)

    ds = eval_tasks.dataset(None, args.tasks)
    report = ds.run(build, args.out / "results.jsonl", variants=[Variant(name="words"), Variant(name="mask")])
    print("| task | arm | status | ok | steps | warned | loop broken |")
    print("|---|---|---|---|---|---|---|")
    for run in report.runs:
        w = warned(run)
        print(f"| {run.case} | {run.variant} | {run.status} | {'yes' if run.verdict == 'pass' else 'no'} "
              f"| {run.steps} | {w} | {w and run.status != 'stalled'} |")
    for arm in ("words", "mask"):
        runs = report.of(arm)
        ws = [warned(r) for r in runs]
        print(f"{arm}: warned {sum(ws)}, loops broken "
              f"{sum(w and r.status != 'stalled' for w, r in zip(ws, runs))}, "
              f"stalled {sum(r.status == 'stalled' for r in runs)}, "
              f"succeeded {sum(r.verdict == 'pass' for r in runs)}/{len(runs)}")
    print(report.compare("words", "mask").sentence)


if __name__ == "__main__":
    main()
