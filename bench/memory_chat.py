"""Long chats under a context budget: prompt tokens per turn, with and without the budget.

    python bench/memory_chat.py scripted                      # 200 turns, scripted model
    flock /tmp/jsonagent-bench.lock python bench/memory_chat.py local   # 30 turns, the 1.5B

scripted: one session of 200 turns (each a lookup, then the answer) on a scripted model,
once without a budget and once with `--budget` tokens. Prints each turn's prompt tokens
(all the turn's requests, summaries included) and its largest request, checks that no
request went over the budget, and charts both runs.

local: 30 turns on the local llama.cpp backend with a budget, so that older turns are
summarised along the way. Prints each turn's prompt tokens, the tokens llama.cpp reused
from its KV cache, and seconds; the reuse ratio is cached_tokens / prompt_tokens over the
whole chat, summaries included.

Writes bench/results/memory_chat/{scripted,local}.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from jsonagent import Agent, AgentConfig, tool  # noqa: E402
from jsonagent.testing import ScriptedModel, step  # noqa: E402

OUT = HERE / "results" / "memory_chat"
CITIES = ["Oslo", "Lima", "Cairo", "Tokyo", "Paris", "Quito", "Dakar", "Hanoi", "Perth", "Turin",
          "Porto", "Cork", "Bergen", "Kyoto", "Lyon", "Basel", "Graz", "Malmo", "Bonn", "Split",
          "Nice", "Riga", "Minsk", "Sofia", "Tunis", "Accra", "Delhi", "Busan", "Osaka", "Dubai"]


@tool
def lookup(city: str) -> dict:
    """Look up facts about a city.

    Args:
        city: the city's name
    """
    n = sum(map(ord, city))
    return {"city": city, "population": n * 1371, "founded": 900 + n % 1000,
            "elevation_m": n % 700, "area_km2": n % 900 + 40,
            "notes": f"{city} has {n % 40 + 3} museums and {n % 17 + 2} bridges."}


def question(turn: int) -> str:
    city = CITIES[(turn - 1) % len(CITIES)]
    return f"Turn {turn}: use the lookup tool to find the population of {city}, then answer with the number."


# -- scripted ---------------------------------------------------------------------------------

def scripted_model() -> ScriptedModel:
    def reply(messages, response_format):
        if response_format is None:  # a summary request
            return ("So far the user asked, turn after turn, for the population of one city at a "
                    "time; each was looked up with the lookup tool and answered with the number. "
                    "Nothing failed. Nothing remains from those turns.")
        last = messages[-1]["content"]
        if last.startswith('{"tool_name"'):
            data = json.loads(last)["response"]
            return step("TaskCompleteTool", {"output": str(data["population"])},
                        f"The lookup says {data['city']} has {data['population']} people.")
        city = last.split("population of ")[1].split(",")[0]
        return step("lookup", {"city": city}, f"I need the facts about {city}.")

    return ScriptedModel(reply)


def run_chat(model, turns: int, config: AgentConfig) -> list[dict]:
    """One session; per turn: its requests' prompt tokens, cached tokens and seconds."""
    calls: list = []
    agent = Agent(model=model, tools=[lookup], config=config,
                  on_event=lambda e: calls.append(e) if e.type in ("model_reply", "summary",
                                                                   "context") else None)
    rows = []
    with agent.session() as session:
        for turn in range(1, turns + 1):
            calls.clear()
            t0 = time.perf_counter()
            result = session.run(question(turn))
            seconds = time.perf_counter() - t0
            usages = [c.usage for c in calls if c.type in ("model_reply", "summary")]
            steps = [c.usage.prompt_tokens for c in calls if c.type == "model_reply"]
            rows.append({
                "turn": turn, "status": result.status, "answer": str(result.answer)[:120],
                "requests": len(usages), "prompt_tokens": sum(u.prompt_tokens for u in usages),
                "cached_tokens": sum(u.cached_tokens for u in usages),
                "largest_request": max(steps, default=0),
                "summaries": sum(c.type == "summary" for c in calls),
                "compactions": [c.action for c in calls if c.type == "context"],
                "seconds": round(seconds, 2),
            })
            print(_row(rows[-1]), flush=True)
    return rows


def _row(r: dict) -> str:
    mark = ",".join(r["compactions"])
    return (f"| {r['turn']} | {r['requests']} | {r['prompt_tokens']} | {r['largest_request']} "
            f"| {r['cached_tokens']} | {r['seconds']} | {mark} | {r['status']} |")


HEADER = ["| turn | requests | prompt tok | largest request | cached tok | s | compaction | status |",
          "|---|---|---|---|---|---|---|---|"]


def scripted(args) -> None:
    runs = {}
    for label, budget in (("no budget", None), (f"budget {args.budget}", args.budget)):
        print(f"\n## {label}\n\n" + "\n".join(HEADER))
        config = AgentConfig(max_context_tokens=budget, max_steps=4)
        runs[label] = run_chat(scripted_model(), args.turns, config)
    summary = []
    for label, rows in runs.items():
        ok = sum(r["status"] == "completed" for r in rows)
        largest = max(r["largest_request"] for r in rows)
        last20 = [r["largest_request"] for r in rows[-20:]]
        summary.append(f"| {label} | {ok}/{len(rows)} | {rows[0]['largest_request']} | "
                       f"{rows[len(rows) // 2]['largest_request']} | {rows[-1]['largest_request']} | "
                       f"{largest} | {min(last20)}–{max(last20)} | "
                       f"{sum(r['prompt_tokens'] for r in rows)} | {sum(r['summaries'] for r in rows)} |")
    lines = [f"# {args.turns}-turn scripted chat", "",
             "Prompt tokens as the scripted model reports them (characters / 4); the budget "
             "counts with the calibrated estimate.", "",
             "| run | completed | largest request turn 1 | mid | last | max over the chat "
             "| range over the last 20 turns | prompt tokens, whole chat | summaries |",
             "|---|---|---|---|---|---|---|---|---|", *summary]
    budgeted = runs[f"budget {args.budget}"]
    over = [r["turn"] for r in budgeted if r["largest_request"] > args.budget]
    lines += ["", f"Requests over the budget of {args.budget}: {len(over)}."]
    text = "\n".join(lines)
    print("\n" + text)
    for label, rows in runs.items():
        text += f"\n\n## {label}\n\n" + "\n".join(HEADER + [_row(r) for r in rows])
    _save("scripted", text, runs, args.budget)


# -- local ------------------------------------------------------------------------------------

def local(args) -> None:
    from jsonagent.models import catalog
    from jsonagent.models.local import LocalConfig, LocalModel

    path = catalog.path(args.model) if args.model in catalog.CATALOG else Path(args.model)
    model = LocalModel(path, LocalConfig(n_ctx=args.n_ctx, max_tokens=args.max_tokens))
    print(f"\n## {path.name}, budget {args.local_budget}, n_ctx {args.n_ctx}\n\n" + "\n".join(HEADER))
    config = AgentConfig(max_context_tokens=args.local_budget, max_steps=4)
    t0 = time.perf_counter()
    rows = run_chat(model, args.local_turns, config)
    wall = time.perf_counter() - t0
    model.close()
    prompt = sum(r["prompt_tokens"] for r in rows)
    cached = sum(r["cached_tokens"] for r in rows)
    ok = sum(r["status"] == "completed" for r in rows)
    # right: the answer names the looked-up number ("The population of Oslo is 566,223.")
    right = sum(str(lookup.fn(city=CITIES[(r["turn"] - 1) % len(CITIES)])["population"])
                in r["answer"].replace(",", "") for r in rows)
    largest = max(r["largest_request"] for r in rows)
    text = "\n".join([
        f"# {args.local_turns}-turn chat on {path.name}", "",
        f"Budget {args.local_budget} tokens (exact counts, llama.cpp's tokenizer), n_ctx {args.n_ctx}, "
        f"replies capped at {args.max_tokens} tokens, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[1]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
        "| turns | completed | right answers | summaries | prompt tok | reused (cached) tok | reuse ratio "
        "| largest request | s/turn (median) | s/turn (mean) |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {len(rows)} | {ok} | {right} | {sum(r['summaries'] for r in rows)} | {prompt} | {cached} "
        f"| {cached / prompt:.1%} | {largest} | {sorted(r['seconds'] for r in rows)[len(rows) // 2]} "
        f"| {wall / len(rows):.1f} |"])
    print("\n" + text)
    _save("local", text + "\n\n## Per turn\n\n" + "\n".join(HEADER + [_row(r) for r in rows]),
          {"local": rows}, args.local_budget)


def _save(name: str, text: str, runs: dict, budget: int) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(runs, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no chart: pip install jsonagent[bench] for matplotlib)")
        (OUT / f"{name}.md").write_text(text + "\n")
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, rows in runs.items():
        turns = [r["turn"] for r in rows]
        ax.plot(turns, [r["largest_request"] for r in rows], label=f"{label}: largest request")
        if any(r["cached_tokens"] for r in rows):
            ax.plot(turns, [r["prompt_tokens"] for r in rows], label=f"{label}: all requests",
                    linewidth=0.8)
            ax.plot(turns, [r["cached_tokens"] for r in rows], linestyle="--", linewidth=0.8,
                    label=f"{label}: reused from the KV cache")
    ax.axhline(budget, color="grey", linewidth=0.8, linestyle=":", label=f"budget ({budget})")
    ax.set_xlabel("turn")
    ax.set_ylabel("prompt tokens")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=110)
    (OUT / f"{name}.md").write_text(text + f"\n\n![tokens per turn]({name}.png)\n")
    print(f"wrote {OUT / name}.md, .json, .png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=["scripted", "local"])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--local-turns", type=int, default=30)
    parser.add_argument("--local-budget", type=int, default=2500)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--max-tokens", type=int, default=512)
    args = parser.parse_args()
    scripted(args) if args.which == "scripted" else local(args)


if __name__ == "__main__":
    main()
