"""The embedding tasks on the in-process model, for two trees of jsonagent side by side on one
machine: where did a task's seconds go between them?

    python bench/embed_speed.py --tree before=/tmp/old --tree now=. \
        --model qwen2.5-coder-1.5b --out bench/results/qwen2.5-coder-1.5b-instruct-q4/embed_speed

Each run is a child process of its own, with one tree's package first on its path, so nothing
is shared but the OS file cache; the trees take turns task by task, so a machine that gets
busier slows both alike. A child loads the model (timed apart), runs one task as the task
benchmark does (the task's own tools beside the core ones, its typed answer, its scripted
person, approvals refused, temperature 0, no KV cache from disk) and times every model call:
its seconds, the prompt tokens it held, those reused from the last call's prefix, and those
it wrote.

The tasks come from this tree's bench/tasks (pure standard library), so both trees run the
same list. results.jsonl is the checkpoint: run the same command again and it goes on.
summary.txt holds the table, per tree: seconds a task and a step, steps, prompt tokens
evaluated a call (held minus reused), and written tokens a call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(task_id: str, gguf: str, max_steps: int) -> dict:
    """One run of one task, in this process, on whichever jsonagent is first on the path."""
    sys.path.insert(0, str(HERE))
    from datetime import datetime, timezone

    from tasks import TASKS, Clock, scripted_human
    from tasks.embedding import answer_text

    import jsonagent
    from jsonagent import Agent, tool
    from jsonagent.models.local import LocalConfig, LocalModel

    task = next(t for t in TASKS if t.id == task_id)
    t0 = time.perf_counter()
    model = LocalModel(gguf, LocalConfig(n_ctx=8192, temperature=0.0, kv_cache=False))
    load_s = time.perf_counter() - t0
    calls: list[dict] = []
    complete = model.complete

    def timed(messages, response_format, **kw):
        t = time.perf_counter()
        reply = complete(messages, response_format, **kw)
        u = reply.usage
        calls.append({"s": round(time.perf_counter() - t, 3), "prompt": u.prompt_tokens,
                      "reused": getattr(u, "cached_tokens", 0), "wrote": u.completion_tokens,
                      "cut": bool(getattr(reply, "cut", False))})
        return reply

    model.complete = timed
    try:
        from jsonagent import core_tools
    except ImportError:  # a tree of before issue 45
        from jsonagent.tools.toolset import core_tools
    extra = {}
    world = None
    if task.embed is not None:
        world = task.embed()
        own = [tool(fn, confirm=fn.__name__ in world.confirm) for fn in world.tools]
        extra = {"tools": [*core_tools(), *own], "output_type": world.output,
                 "approve": world.approve}
    agent = Agent(model=model, max_steps=max_steps, ask_human=scripted_human(task), **extra)
    start = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    result = agent.run(task.question)
    seconds = time.perf_counter() - t0
    clock = Clock(start, datetime.now(timezone.utc))
    answer = "" if result.answer is None else answer_text(result.answer)
    held = world is None or world.holds()
    passed = result.status == "completed" and task.check(answer, clock) and held
    return {"task": task_id, "jsonagent": str(Path(jsonagent.__file__).parent.parent),
            "load_s": round(load_s, 2), "s": round(seconds, 2), "status": result.status,
            "passed": passed, "steps": len(result.steps), "calls": calls,
            "answer": answer[:200], "error": result.error}


def run_child(tree: Path, task_id: str, gguf: str, max_steps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, __file__, "--child", task_id, "--gguf", gguf,
                           "--max-steps", str(max_steps)], env=env, capture_output=True,
                          text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        return {"task": task_id, "status": "crashed", "passed": False, "s": None,
                "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300], "calls": []}
    return json.loads(lines[-1])


def summary(rows: list[dict], trees: list[str]) -> str:
    out = ["tree      tasks  passed  s/task(med)  s/step(med)  steps  evaluated/call  "
           "wrote/call  s/call"]
    for name in trees:
        mine = [r for r in rows if r["tree"] == name and r.get("s") is not None]
        if not mine:
            continue
        calls = [c for r in mine for c in r["calls"]]
        per_step = [r["s"] / max(r["steps"], 1) for r in mine]
        evaluated = [c["prompt"] - c["reused"] for c in calls]
        out.append(f"{name:<9} {len(mine):>5} {sum(r['passed'] for r in mine):>7} "
                   f"{statistics.median(r['s'] for r in mine):>12.1f} "
                   f"{statistics.median(per_step):>12.2f} "
                   f"{sum(r['steps'] for r in mine) / len(mine):>6.1f} "
                   f"{statistics.mean(evaluated) if calls else 0:>15.0f} "
                   f"{statistics.mean(c['wrote'] for c in calls) if calls else 0:>11.0f} "
                   f"{statistics.mean(c['s'] for c in calls) if calls else 0:>7.2f}")
    out.append("")
    out.append("task                       " + "  ".join(f"{t:>22}" for t in trees))
    for task in dict.fromkeys(r["task"] for r in rows):
        cells = []
        for name in trees:
            r = next((r for r in rows if r["tree"] == name and r["task"] == task), None)
            cells.append("-" if r is None or r.get("s") is None else
                         f"{r['s']:6.1f}s {r['steps']} steps {'pass' if r['passed'] else 'FAIL'}")
        out.append(f"{task:<26} " + "  ".join(f"{c:>22}" for c in cells))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child")
    ap.add_argument("--gguf")
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH of a jsonagent tree")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--tasks", default="", help="comma-separated task ids (default: the "
                    "embedding tasks)")
    ap.add_argument("--max-steps", type=int, default=10)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.gguf, args.max_steps)))
        return
    sys.path.insert(0, str(HERE))
    from tasks import TASKS

    from jsonagent.models import catalog

    gguf = str(catalog.path(args.model))
    trees = dict(t.split("=", 1) for t in args.tree)
    ids = args.tasks.split(",") if args.tasks else [t.id for t in TASKS if t.embed is not None]
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    rows = [json.loads(ln) for ln in results.read_text().splitlines()] if results.exists() else []
    done = {(r["tree"], r["task"]) for r in rows}
    todo = [(task, name) for task in ids for name in trees if (name, task) not in done]
    for i, (task, name) in enumerate(todo, 1):
        row = {"tree": name, **run_child(Path(trees[name]).resolve(), task, gguf,
                                         args.max_steps)}
        rows.append(row)
        with results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"[{i}/{len(todo)}] {name:<8} {task:<26} {row.get('s')} s, "
              f"{row.get('steps', '-')} steps, {row['status']}"
              f"{'' if row['passed'] else ' (not passed)'}", file=sys.stderr, flush=True)
    text = summary(rows, list(trees))
    (args.out / "summary.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
