"""The task benchmark on `jsonagent eval`: bench/tasks as a dataset, the same cases in process
and through llama.cpp's server, repeated, with the eval's statistics, paired test and report.

    python bench/eval_tasks.py --model qwen2.5-coder-1.5b --repeat 3 \
        --out bench/results/qwen2.5-coder-1.5b-instruct-q4/round7

Variants: `local` is the in-process backend; `server` is the openai backend against
`python -m llama_cpp.server` on 127.0.0.1, serving the same GGUF, in schema mode; the other
`server-...` variants are that with one change or all of them (bench/server_variants.py).
All run at temperature 0 with the same scripted person, approvals and max steps. The results
file is the eval's checkpoint: run the same command again after a stop and it goes on.

Writes results.jsonl, report.html and summary.txt (the terminal table and the paired test).
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import ClassVar

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent / "tests" / "e2e")]

from server_variants import SERVER_VARIANTS, server_config, server_model  # noqa: E402
from tasks import TASKS, Clock, scripted_human  # noqa: E402
from tasks.embedding import answer_text  # noqa: E402

from jsonagent import Agent, AgentConfig, tool  # noqa: E402
from jsonagent.evals import Case, Dataset, Evaluator, Variant  # noqa: E402

BY_ID = {t.id: t for t in TASKS}
WORLDS: dict[str, object] = {}
"""Each embedding task's world (its tools' state) for the run in progress, by case: the
factory makes it, and the check reads what must hold of it afterwards."""


@dataclass
class TaskCheck(Evaluator):
    """The task's own checker on the answer, with the clock read at the run's start and end,
    and for an embedding task, what must hold of its world afterwards."""

    kind: ClassVar[str] = "task"

    def check(self, case, outcome):
        task, result = BY_ID[case.name], outcome.result
        events = outcome.events
        clock = Clock(*(datetime.fromtimestamp(e.t, timezone.utc) for e in (events[0], events[-1])))
        answer = "" if result.answer is None else answer_text(result.answer)
        world = WORLDS.pop(case.name, None)
        held = world is None or world.holds()
        passed = result.status == "completed" and task.check(answer, clock) and held
        why = "" if passed else (f"{result.status}: {result.error}" if result.status != "completed"
                                 else "what must hold did not" if not held
                                 else f"answer {answer[:160]!r}, expected {task.expected!r}")
        return passed, why


def dataset(kinds: set[str] | None, ids: list[str] | None) -> Dataset:
    tasks = [t for t in TASKS if (not kinds or t.kind in kinds) and (not ids or t.id in ids)]
    return Dataset(cases=[Case(input=t.question, name=t.id, tags=[t.kind]) for t in tasks],
                   evaluators=[TaskCheck()])


@functools.cache
def model_for(variant: str, gguf: str, base_url: str | None):
    """One model a variant, loaded once for the whole benchmark."""
    from jsonagent.models import resolve_model

    if variant == "local":
        return resolve_model(f"local:{gguf}", temperature=0.0)
    return server_model(variant, base_url)


def factory(gguf: str, base_url: str | None, max_steps: int):
    def build(case: Case, variant: Variant) -> Agent:
        task = BY_ID[case.name]
        extra = {}
        if task.embed is not None:
            world = WORLDS[case.name] = task.embed()
            from jsonagent.tools.toolset import core_tools

            own = [tool(fn, confirm=fn.__name__ in world.confirm) for fn in world.tools]
            extra = {"tools": [*core_tools(), *own], "output_type": world.output,
                     "approve": world.approve}  # by default the person refuses every call put
        return Agent(model=model_for(variant.name, gguf, base_url), max_steps=max_steps,
                     ask_human=scripted_human(task),
                     config=AgentConfig(**(server_config(variant.name)
                                           if variant.name in SERVER_VARIANTS else {})), **extra)
    return build


def main() -> None:
    from llama_server import LlamaServer

    from jsonagent.cli.batch import _Progress
    from jsonagent.cli.evals import print_report
    from jsonagent.evals.html import render
    from jsonagent.models import catalog

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--kinds", default="", help="task kinds (comma-separated); default all")
    p.add_argument("--tasks", nargs="*", help="task ids; default all of the kinds")
    p.add_argument("--variants", default="local,server")
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    # a `timeout` or a kill ends us through the finally blocks: the server goes with us
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    gguf = str(catalog.path(args.model))
    args.out.mkdir(parents=True, exist_ok=True)
    ds = dataset(set(filter(None, args.kinds.split(","))), args.tasks)
    variants = [Variant(name=v) for v in args.variants.split(",")]
    if unknown := {v.name for v in variants} - {"local", *SERVER_VARIANTS}:
        p.error(f"unknown variants: {', '.join(sorted(unknown))}")
    with LlamaServer(gguf, n_ctx=8192, log=args.out / "server.log") \
            if any(v.name in SERVER_VARIANTS for v in variants) else _nothing() as server:
        build = factory(gguf, server.base_url if server else None, args.max_steps)
        with _Progress(len(ds.cases) * len(variants) * args.repeat, "eval",
                       lambda r: (r.extra or {}).get("verdict") == "fail") as bar:
            report = ds.run(build, args.out / "results.jsonl", repeat=args.repeat,
                            variants=variants, on_result=bar.advance)
    (args.out / "report.html").write_text(render(report, title=f"{args.model}: bench tasks"))
    print_report(report, f"{args.model}: {len(report.runs)} runs of {len(ds.cases)} tasks")


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


if __name__ == "__main__":
    main()
