"""The peer side of the task benchmark: smolagents' ToolCallingAgent on the same tasks.

Runs inside smolagents' own virtual environment, started by eval_tasks.py as

    VENV/bin/python bench/smol_runner.py --base-url URL --model NAME --max-steps N --out FILE [TASK_ID...]

Its tools call the very functions jsonagent's built-ins call: `jsonagent.tools.core.get_time`,
`jsonagent.tools.core.code_interpreter` on the same `sandbox`, and the task's scripted human.
Only smolagents itself comes from the other environment; jsonagent is found on PYTHONPATH.
One JSON line per task goes to --out; eval_tasks.py scores it into the eval's results file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import smolagents  # noqa: E402
from smolagents import OpenAIServerModel, ToolCallingAgent, tool  # noqa: E402
from smolagents.utils import AgentGenerationError, AgentParsingError, AgentToolCallError  # noqa: E402

from jsonagent.tools import core as builtins  # noqa: E402
from jsonagent.tools.tool import RunContext  # noqa: E402
from tasks import TASKS, Clock, now_utc, scripted_human  # noqa: E402

REPLY_ERRORS = (AgentParsingError, AgentToolCallError, AgentGenerationError)


def make_tools(ctx: RunContext, human) -> list:
    @tool
    def get_time(timezone: str | None = None, format: str | None = None) -> dict:
        """Get the current date and time. Use it whenever the answer depends on what time it is now.

        Args:
            timezone: IANA time zone such as 'Europe/Paris' or 'UTC'. Defaults to the machine's local zone.
            format: Optional strftime format, e.g. '%Y-%m-%d %H:%M'. Defaults to ISO 8601.
        """
        return builtins.get_time(timezone, format)

    @tool
    def ask_human(question: str) -> str:
        """Ask the person you are working for a free-form question, when you need information or a decision only they have.

        Args:
            question: The question to ask, in one or two sentences.
        """
        return human(question)

    @tool
    def code_interpreter(code: str) -> dict:
        """Run Python code in an isolated, stateful interpreter and see its output. Variables persist between calls. Print what you want to see. No network access.

        Args:
            code: The Python code to run.
        """
        return builtins.code_interpreter(code, ctx)

    return [get_time, ask_human, code_interpreter]


def embedded_tools(embedding) -> list:
    """The task's own functions as smolagents tools. smolagents has no approval step, so a
    call the person would refuse returns their refusal instead of running, as jsonagent's
    approval does (a call the person approves runs); a typed answer is checked on its text."""
    import functools

    def refused(fn):
        @functools.wraps(fn)
        def ask_first(*args, **kwargs):
            if embedding.approve(fn.__name__, kwargs):
                return fn(*args, **kwargs)
            return "The person refused this call: do not run it."
        return ask_first

    return [tool(refused(fn) if fn.__name__ in embedding.confirm else fn)
            for fn in embedding.tools]


def run_task(task, model, max_steps: int) -> dict:
    from jsonagent.bundled import sandbox
    Sandbox = sandbox.Sandbox

    ctx = RunContext(sandbox_factory=lambda: Sandbox(timeout=30.0))
    embedding = task.embed() if task.embed else None
    own = embedded_tools(embedding) if embedding else []
    agent = ToolCallingAgent(tools=[*make_tools(ctx, scripted_human(task)), *own], model=model,
                             max_steps=max_steps, verbosity_level=0)
    start, t0 = now_utc(), time.perf_counter()
    error = None
    try:
        run = agent.run(task.question, return_full_result=True)
        output, state = run.output, run.state
    except Exception as exc:  # the framework gave up; that is a result, not a crash of the bench
        output, state, error = None, "error", f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - t0
    clock = Clock(start, now_utc())
    ctx.close()

    actions = [s for s in agent.memory.steps if type(s).__name__ == "ActionStep"]
    bad = [s for s in actions if isinstance(s.error, REPLY_ERRORS)]
    prompt = sum(s.token_usage.input_tokens for s in actions if s.token_usage)
    completion = sum(s.token_usage.output_tokens for s in actions if s.token_usage)
    ended_by_tool = any(s.is_final_answer for s in actions) and state == "success"
    answer = "" if output is None else str(output)
    return {
        "task": task.id, "kind": task.kind, "framework": "smolagents", "mode": "tool-calling",
        "version": smolagents.__version__,
        "status": "completed" if ended_by_tool else state,
        "success": bool(answer) and task.check(answer, clock)
        and (embedding is None or embedding.holds()),
        "answer": answer[:500], "steps": len(actions), "replies": len(actions),
        "first_try_valid": len(actions) - len(bad), "repairs": 0, "reasks": len(bad),
        "prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": 0,
        "seconds": round(seconds, 2), "error": error,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--out", required=True)
    parser.add_argument("tasks", nargs="*")
    args = parser.parse_args()
    # llama-cpp-python's server takes message content only as plain text, not as a list of parts
    model = OpenAIServerModel(model_id=args.model, api_base=args.base_url, api_key="sk-local",
                              temperature=0.0, max_tokens=args.max_tokens, flatten_messages_as_text=True)
    chosen = [t for t in TASKS if not args.tasks or t.id in args.tasks]
    with open(args.out, "a", encoding="utf-8") as out:
        for task in chosen:
            record = run_task(task, model, args.max_steps)
            out.write(json.dumps(record) + "\n")
            out.flush()
            print(f"smolagents {task.id}: {'ok' if record['success'] else 'FAIL'} "
                  f"({record['status']}, {record['steps']} steps, {record['seconds']}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
