"""The task benchmark: jsonagent in each JSON mode, and smolagents, on one local model.

    python bench/run_tasks.py --model qwen2.5-coder-1.5b
    python bench/run_tasks.py --model smollm2-135m --runs schema,local-schema --tasks code-pow time-year

One llama.cpp server (`python -m llama_cpp.server`) serves the model on 127.0.0.1 for the
whole benchmark. The runs, one after another:

    schema, object, prompt   jsonagent's openai backend against that server, in that --json-mode
    server-shipped           schema, as round 5 shipped it: the server's temperature and repetition
                             penalty, tool results as the user's words
    server-temp0, server-no-penalty, server-tool-calls   the same, with one change of round 6 alone
                             (schema has all three)
    server-no-tool-calls     schema without the tool-call form (results as the user's words)
    react                    the same, with --prompt-style react (ReAct text, no response_format)
    local-schema             jsonagent's in-process local backend (reports reused prefix tokens)
    local-thought-none, -400, -200   the same, with no cap on the thought, or 400 or 200 chars
    smolagents               smolagents' ToolCallingAgent against the same server, in its own
                             virtual environment (--smol-python), with tools that call the same
                             functions (see smol_runner.py)

Runs go in the order given. Every run gets the same tasks, the same max steps and the same
scripted human, at temperature 0 unless the run says otherwise.

smolagents' environment needs jsonagent's own dependencies too, since its tools import them:

    python -m venv /work/venv-smol
    /work/venv-smol/bin/pip install smolagents==1.26.0 openai pydantic jsonschema json-repair typer

Writes RESULTS.json (every task of every run) and RESULTS.md (summary and per-task tables).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE), str(ROOT / "tests" / "e2e")]

from llama_server import LlamaServer  # noqa: E402
from tasks import TASKS, Clock, now_utc, scripted_human  # noqa: E402
from tasks.embedding import answer_text  # noqa: E402

from jsonagent import Agent, AgentConfig, read_journal  # noqa: E402

LOCAL_RUNS = {"local-schema": AgentConfig().thought_max_chars, "local-thought-none": None,
              "local-thought-400": 400, "local-thought-200": 200}
"""In-process runs, by the cap on the thought each puts in the schema (the thought budget)."""
STYLES = {"react": "react"}  # runs in a prompt style other than json; they send no response_format
SERVER_RUNS = {  # schema-mode server runs: (temperature, no repetition penalty, tool-call form)
    "schema": (0.0, True, True), "server-shipped": (None, False, False),
    "server-temp0": (0.0, False, False), "server-no-penalty": (None, True, False),
    "server-tool-calls": (None, False, True), "server-no-tool-calls": (0.0, True, False)}
RUNS = ("schema", "smolagents", "local-schema", "object", "prompt", "react",
        *(r for r in SERVER_RUNS if r != "schema"), *(r for r in LOCAL_RUNS if r != "local-schema"))


def model_path(spec: str) -> Path:
    from jsonagent.models import catalog

    return catalog.path(spec) if spec in catalog.CATALOG else Path(spec)


def embedded_tools(embedding) -> list:
    """The built-in tools and the task's own, as a script would pass them; calls the person
    must approve are marked so."""
    from jsonagent import tool
    from jsonagent.tools.toolset import core_tools

    own = [tool(fn, confirm=fn.__name__ in embedding.confirm) for fn in embedding.tools]
    return [*core_tools(), *own]


def run_jsonagent(task, model, mode: str | None, run: str, max_steps: int, transcripts: Path,
                  style: str = "json", stall_after: int | None = AgentConfig().stall_after,
                  thought_max: int | None = AgentConfig().thought_max_chars,
                  tool_calls: bool | None = None) -> dict:
    transcript = transcripts / f"{run}-{task.id}.jsonl"
    transcript.unlink(missing_ok=True)
    embedding = task.embed() if task.embed else None
    extra = {} if embedding is None else {
        "tools": embedded_tools(embedding), "output_type": embedding.output,
        "approve": embedding.approve}  # by default the person refuses every call put to them
    agent = Agent(model=model, max_steps=max_steps, ask_human=scripted_human(task),
                  config=AgentConfig(json_mode=mode, prompt_style=style, stall_after=stall_after,
                                     thought_max_chars=thought_max, tool_calls=tool_calls),
                  transcript=transcript, **extra)
    start, t0 = now_utc(), time.perf_counter()
    result = agent.run(task.question)
    seconds = time.perf_counter() - t0
    clock = Clock(start, now_utc())
    events = read_journal(transcript)
    reasked_steps = {e.step for e in events if e.type == "reask"}
    answer = "" if result.answer is None else answer_text(result.answer)
    held = embedding is None or embedding.holds()
    return {**_cells(events),
        "task": task.id, "kind": task.kind, "framework": "jsonagent", "mode": run,
        "status": result.status,
        "success": result.status == "completed" and task.check(answer, clock) and held,
        "answer": answer[:500], "steps": len(result.steps), "replies": result.stats.model_calls,
        "first_try_valid": len([s for s in result.steps if s.index not in reasked_steps]),
        "repairs": result.stats.repairs, "reasks": result.stats.reasks,
        "prompt_tokens": result.usage.prompt_tokens, "completion_tokens": result.usage.completion_tokens,
        "cached_tokens": result.usage.cached_tokens, "seconds": round(seconds, 2),
        "error": result.error, "json_mode_at_end": result.json_mode,
    }


def _cells(events) -> dict:
    """Code cells the interpreter split before running them, and cells it refused as run
    together with no safe split (issue 30's splitter)."""
    results = [e.observation for e in events if e.type == "tool_result" and isinstance(e.observation, dict)]
    return {"split_cells": sum("ran" in o for o in results),
            "refused_cells": sum("statements ran together" in str(o.get("error", "")) for o in results)}


def rescan(path: Path) -> None:
    """Count the split cells of a finished run from its transcripts (runs made before the
    count was kept), then redo its summary, tables and chart."""
    data = json.loads(path.read_text())
    for r in data["tasks"]:
        transcript = path.parent / "transcripts" / f"{r['mode']}-{r['task']}.jsonl"
        if r["framework"] == "jsonagent" and transcript.exists():
            r.update(_cells(read_journal(transcript)))
    data["summary"] = summarise(data["tasks"])
    path.write_text(json.dumps(data, indent=1))
    path.with_suffix(".md").write_text(markdown(data["meta"], data["summary"], data["tasks"]))
    chart(data["summary"], path.with_suffix(".png"))


def summarise(records: list[dict]) -> list[dict]:
    rows = []
    for run in dict.fromkeys(r["mode"] for r in records):
        rs = [r for r in records if r["mode"] == run]
        steps = sum(r["steps"] for r in rs)
        replies = sum(r["replies"] for r in rs)
        seconds = sum(r["seconds"] for r in rs)
        prompt = sum(r["prompt_tokens"] for r in rs)
        rows.append({
            "run": f"{rs[0]['framework']} {run}", "tasks": len(rs),
            "success": sum(r["success"] for r in rs),
            "success_rate": round(sum(r["success"] for r in rs) / len(rs), 3),
            "median_steps": statistics.median(r["steps"] for r in rs),
            "median_seconds": round(statistics.median(r["seconds"] for r in rs), 1),
            "seconds_per_step": round(seconds / steps, 2) if steps else None,
            "first_try_valid": f"{sum(r['first_try_valid'] for r in rs)}/{steps}",
            "replies": replies, "repairs": sum(r["repairs"] for r in rs), "reasks": sum(r["reasks"] for r in rs),
            "prompt_tokens": prompt, "completion_tokens": sum(r["completion_tokens"] for r in rs),
            "reused_prefix_tokens": sum(r["cached_tokens"] for r in rs),
            "reused_share": round(sum(r["cached_tokens"] for r in rs) / prompt, 3) if prompt else 0,
            "split_cells": sum(r.get("split_cells", 0) for r in rs),
            "refused_cells": sum(r.get("refused_cells", 0) for r in rs),
            "split_tasks_solved": f"{sum(r['success'] for r in rs if r.get('split_cells'))}/"
                                  f"{sum(1 for r in rs if r.get('split_cells'))}",
        })
    return rows


def chart(summary: list[dict], path: Path) -> None:
    """Success and median seconds per task, one bar per run, side by side (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no chart: pip install jsonagent[bench] for matplotlib)")
        return
    runs = [s["run"] for s in summary][::-1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.6 * len(runs) + 1.4), sharey=True)
    left.barh(runs, [s["success"] for s in summary][::-1], color="tab:green")
    left.set_xlim(0, max(s["tasks"] for s in summary))
    left.set_xlabel(f"tasks solved (of {summary[0]['tasks']})")
    right.barh(runs, [s["median_seconds"] for s in summary][::-1], color="tab:blue")
    right.set_xlabel("median seconds per task")
    for ax, key in ((left, "success"), (right, "median_seconds")):
        for y, s in enumerate(summary[::-1]):
            ax.text(s[key], y, f" {s[key]}", va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(meta: dict, summary: list[dict], records: list[dict]) -> str:
    lines = [f"# Task benchmark: {meta['model']}", "",
             f"{meta['tasks']} tasks, max {meta['max_steps']} steps, temperature 0 (the server's own in "
             f"server-shipped, -no-penalty and -tool-calls), "
             f"{meta['cpus']} CPUs (load average {meta['load_average_at_start'][1]:.1f} at start, "
             f"{meta['load_average_at_end'][1]:.1f} at end), llama-cpp-python {meta['llama_cpp']}, smolagents {meta.get('smolagents', '-')}, "
             f"{meta['started']}.", "",
             "| run | success | median steps | median s/task | s/step | first-try-valid steps | repairs | re-asks "
             "| cells split (tasks solved) / refused | prompt tok | completion tok | reused prefix tok |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        reused = f"{s['reused_prefix_tokens']} ({s['reused_share']:.0%})" if s["reused_prefix_tokens"] else "n/r"
        cells = f"{s['split_cells']} ({s['split_tasks_solved']}) / {s['refused_cells']}" \
            if s["run"].startswith("jsonagent") else "-"  # smolagents has no splitter
        lines.append(f"| {s['run']} | {s['success']}/{s['tasks']} ({s['success_rate']:.0%}) | {s['median_steps']} "
                     f"| {s['median_seconds']} | {s['seconds_per_step']} | {s['first_try_valid']} | {s['repairs']} "
                     f"| {s['reasks']} | {cells} | {s['prompt_tokens']} "
                     f"| {s['completion_tokens']} | {reused} |")
    lines += ["", "cells split: code cells the interpreter split at statement boundaries before running "
              "them (in brackets, the tasks with such a cell that were solved); refused: cells whose "
              "statements ran together with no safe split, answered with how to write them.", "",
              "n/r: not reported (llama-cpp-python's server does not report cached prompt tokens).", "",
              "## Per task", "",
              "| task | run | ok | status | steps | first-try-valid | repairs | re-asks | prompt tok | completion tok "
              "| reused tok | s | answer |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: ([t.id for t in TASKS].index(r["task"]), r["mode"])):
        answer = " ".join(str(r["answer"]).split())[:60].replace("|", "\\|")
        lines.append(f"| {r['task']} | {r['framework']} {r['mode']} | {'yes' if r['success'] else 'no'} | {r['status']} "
                     f"| {r['steps']} | {r['first_try_valid']} | {r['repairs']} | {r['reasks']} | {r['prompt_tokens']} "
                     f"| {r['completion_tokens']} | {r['cached_tokens']} | {r['seconds']} | {answer} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="catalog name or .gguf path")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, from {','.join(RUNS)}")
    parser.add_argument("--tasks", nargs="*", default=[], help="task ids (default: all)")
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--max-tokens", type=int, default=1024, help="cap on one reply, for every run")
    parser.add_argument("--smol-python", default=os.environ.get("SMOL_PYTHON", "/work/venv-smol/bin/python"))
    parser.add_argument("--out", type=Path, default=None, help="output folder (default bench/results/MODEL)")
    parser.add_argument("--decoder", default="llguidance", choices=["llguidance", "grammar"],
                        help="local-schema's constrained decoder")
    parser.add_argument("--no-stall", action="store_true", help="turn stall detection off (stall_after=None)")
    parser.add_argument("--rescan", type=Path, metavar="RESULTS.json",
                        help="only redo a finished run's summary, tables and chart")
    args = parser.parse_args()
    if args.rescan:
        rescan(args.rescan)
        return

    gguf = model_path(args.model)
    stall_after = None if args.no_stall else AgentConfig().stall_after
    runs = [r for r in args.runs.split(",") if r]
    tasks = [t for t in TASKS if not args.tasks or t.id in args.tasks]
    out = args.out or HERE / "results" / gguf.stem
    transcripts = out / "transcripts"
    transcripts.mkdir(parents=True, exist_ok=True)
    import llama_cpp

    meta = {"model": gguf.name, "tasks": len(tasks), "max_steps": args.max_steps, "cpus": os.cpu_count(),
            "llama_cpp": llama_cpp.__version__, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "runs": runs, "decoder": args.decoder, "stall_after": stall_after,
            "load_average_at_start": os.getloadavg()}
    records: list[dict] = []

    def save() -> None:
        summary = summarise(records)
        meta["load_average_at_end"] = os.getloadavg()
        (out / "RESULTS.json").write_text(json.dumps({"meta": meta, "summary": summary, "tasks": records}, indent=1))
        (out / "RESULTS.md").write_text(markdown(meta, summary, records))

    # One model at a time is busy: an idle llama.cpp server takes no CPU from the local model.
    with contextlib.ExitStack() as held:
        local = server = None
        for run in runs:
            if run == "smolagents" or run not in LOCAL_RUNS:
                server = server or held.enter_context(LlamaServer(gguf, n_ctx=args.n_ctx, log=out / "server.log"))
            if run == "smolagents":
                records += run_smolagents(args, server, tasks, out, meta)
                save()
                continue
            if run in LOCAL_RUNS:
                if local is None:
                    from jsonagent.models.local import LocalConfig, LocalModel

                    local = LocalModel(gguf, LocalConfig(n_ctx=args.n_ctx, max_tokens=args.max_tokens,
                                                         decoder=args.decoder))
                    held.callback(local.close)
                model, mode, style, knobs = local, "schema", "json", {"thought_max": LOCAL_RUNS[run]}
            else:
                model, mode, style, knobs = _server_model(gguf, server, run, args.max_tokens)
            for task in tasks:
                records.append(run_jsonagent(task, model, mode, run, args.max_steps, transcripts, style,
                                             stall_after=stall_after, **knobs))
                _progress(records[-1])
                save()
    save()
    chart(summarise(records), out / "RESULTS.png")
    print((out / "RESULTS.md").read_text().split("## Per task")[0])


def _server_model(gguf: Path, server, run: str, max_tokens: int):
    """The openai backend on the server, set as the run asks: (model, json mode, style, knobs)."""
    from jsonagent.models.openai import OpenAIModel

    temperature, no_penalty, tool_calls = SERVER_RUNS.get(run, SERVER_RUNS["schema"])
    # Replies are capped, as in smolagents' run, so a rambling model cannot fill the context.
    model = OpenAIModel(gguf.stem, base_url=server.base_url, api_key="sk-local",
                        temperature=temperature, max_tokens=max_tokens)
    if not no_penalty:
        model.sampling_extra = {}  # the server's own repetition penalty (1.1 on llama.cpp's)
    mode = None if run in STYLES else "schema" if run in SERVER_RUNS else run
    return model, mode, STYLES.get(run, "json"), {"tool_calls": tool_calls}


def run_smolagents(args, server, tasks, out: Path, meta: dict) -> list[dict]:
    lines = out / "smolagents.jsonl"
    lines.unlink(missing_ok=True)
    version = subprocess.run([args.smol_python, "-c", "import smolagents; print(smolagents.__version__)"],
                             capture_output=True, text=True)
    meta["smolagents"] = version.stdout.strip() or "not installed"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([args.smol_python, str(HERE / "smol_runner.py"), "--base-url", server.base_url,
                    "--model", server.model.stem, "--max-steps", str(args.max_steps), "--out", str(lines),
                    "--max-tokens", str(args.max_tokens),
                    *[t.id for t in tasks]], env=env, check=False)
    return [json.loads(line) for line in lines.read_text().splitlines()] if lines.exists() else []


def _progress(record: dict) -> None:
    print(f"jsonagent {record['mode']} {record['task']}: {'ok' if record['success'] else 'FAIL'} "
          f"({record['status']}, {record['steps']} steps, {record['seconds']}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
