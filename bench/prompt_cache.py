"""The prompt tokens each model call evaluates, in-process and through `llama_cpp.server`
(issue 37, item 5), on a short run of a few bench tasks:

    python bench/prompt_cache.py --variants local,server-before,server \
        --tasks embed-chained-orders embed-two-stores

Each server variant (bench/server_variants.py) gets a fresh server, and runs the tasks one
after another, as the benchmark does. The server's figure comes from its own log: llama-cpp-
python prints "Llama.generate: N prefix-match hit, remaining M prompt tokens to eval" for every
request whose prompt shares a prefix with what its one slot holds (M is what it evaluates);
a request with no such line evaluates its whole prompt, which only the first one does here.
The in-process figure is the usage it reports: prompt tokens less those reused from its KV
cache or loaded from its disk cache of system prompts.

Each model call's raw reply goes to OUT/VARIANT.jsonl, to see where two variants' runs part.
Run it with PYTHONPATH at an older checkout to measure that checkout's library (the script
asks nothing of the server variants but the keywords their names need).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent / "tests" / "e2e")]

from server_variants import SERVER_VARIANTS, server_config, server_model  # noqa: E402
from tasks import TASKS, Clock, now_utc, scripted_human  # noqa: E402
from tasks.embedding import answer_text  # noqa: E402

from jsonagent import Agent, AgentConfig, tool  # noqa: E402
from jsonagent.tools.toolset import core_tools  # noqa: E402

HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
WHOLE = "Llama.generate: full prompt already cached"


def run_tasks(model, config: dict, ids: list[str], max_steps: int, replies: Path) -> dict:
    """Runs the tasks one after another; each model call's raw reply goes to `replies`."""
    totals = {"solved": 0, "calls": 0, "prompt": 0, "evaluated": 0, "first": None, "seconds": 0.0,
              "laid_out": 0}
    for task in (t for t in TASKS if t.id in ids):
        world = task.embed() if task.embed else None
        extra = {} if world is None else {
            "tools": [*core_tools(), *(tool(fn, confirm=fn.__name__ in world.confirm)
                                       for fn in world.tools)],
            "output_type": world.output, "approve": world.approve}
        calls: list[int] = []  # each model call's prompt tokens

        def on_event(event, calls=calls):
            if event.type == "model_reply":
                calls.append(event.usage.prompt_tokens)
                totals["laid_out"] += _canonical(event.raw)
                with replies.open("a") as f:
                    f.write(json.dumps({"task": task.id, "step": event.step, "raw": event.raw,
                                        "prompt_tokens": event.usage.prompt_tokens}) + "\n")
        agent = Agent(model=model, max_steps=max_steps, ask_human=scripted_human(task),
                      config=AgentConfig(**config), on_event=on_event, **extra)
        start, t0 = now_utc(), time.perf_counter()
        result = agent.run(task.question)
        totals["seconds"] += time.perf_counter() - t0
        answer = "" if result.answer is None else answer_text(result.answer)
        totals["solved"] += result.status == "completed" and task.check(
            answer, Clock(start, now_utc())) and (world is None or world.holds())
        totals["calls"] += result.stats.model_calls
        totals["prompt"] += result.usage.prompt_tokens
        totals["evaluated"] += result.usage.prompt_tokens - result.usage.cached_tokens
        if totals["first"] is None and calls:
            totals["first"] = calls[0]
        print(f"  {task.id}: {result.status}, {result.stats.model_calls} calls, "
              f"answer {answer[:80]!r}", flush=True)
    return totals


def _canonical(raw: str) -> bool:
    """The reply is laid out as llguidance lays it out in-process (", " and ": ", no other
    space), which a server's grammar allows but does not force."""
    try:
        return raw == json.dumps(json.loads(raw), ensure_ascii=False)
    except ValueError:
        return False


def from_log(log: Path, first_prompt: int) -> tuple[int, int]:
    """(prompt tokens the server evaluated, requests that reached generation), from its log."""
    text = log.read_text(errors="replace")
    hits = [int(m.group(2)) for m in HIT.finditer(text)]
    cached = text.count(WHOLE)
    # the first request finds the slot empty and prints nothing: it evaluates all its prompt
    return first_prompt + sum(hits), 1 + len(hits) + cached


def main() -> None:
    from llama_server import LlamaServer

    from jsonagent.models import catalog, resolve_model

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--variants", default="local,server-before,server")
    p.add_argument("--tasks", nargs="+", default=["embed-chained-orders", "embed-two-stores"])
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--out", type=Path, default=Path("/tmp/prompt_cache"))
    args = p.parse_args()
    gguf = str(catalog.path(args.model))
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.jsonl"):
        old.unlink()
    rows = []
    for name in args.variants.split(","):
        print(f"{name}:", flush=True)
        if name == "local":
            model = resolve_model(f"local:{gguf}", temperature=0.0)
            t = run_tasks(model, {}, args.tasks, args.max_steps, args.out / "local.jsonl")
            model.close()
            requests = t["calls"]
        else:
            log = args.out / f"{name}.log"
            with LlamaServer(gguf, n_ctx=8192, log=log) as server:
                t = run_tasks(server_model(name, server.base_url), server_config(name),
                              args.tasks, args.max_steps, args.out / f"{name}.jsonl")
            t["evaluated"], requests = from_log(log, t["first"] or 0)
        rows.append((name, t, requests))
    print(f"\n{args.model}, tasks {' '.join(args.tasks)}\n")
    print("| variant | solved | model calls | requests | prompt tokens | evaluated | "
          "evaluated per call | reused | s per call | replies in the in-process layout |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for name, t, requests in rows:
        calls = max(t["calls"], 1)
        print(f"| {name} | {t['solved']}/{len(args.tasks)} | {t['calls']} | {requests} | "
              f"{t['prompt']} | {t['evaluated']} | {t['evaluated'] / calls:.0f} | "
              f"{1 - t['evaluated'] / max(t['prompt'], 1):.0%} | {t['seconds'] / calls:.1f} | "
              f"{t['laid_out']}/{t['calls']} |")


if __name__ == "__main__":
    main()
