"""The task benchmark on `jsonagent eval`: bench/tasks as a dataset, run in process, through
llama.cpp's server in each setting, and by smolagents on the same server, repeated, with the
eval's statistics, paired tests and report.

    python bench/eval_tasks.py --model qwen2.5-coder-1.5b --repeat 3 \
        --out bench/results/qwen2.5-coder-1.5b-instruct-q4/round7
    python bench/eval_tasks.py --model smollm2-135m --variants local,server --tasks code-pow

Variants (see VARIANTS), every one at temperature 0 unless it says otherwise, with the same
scripted person, approvals and max steps:

    local                  the in-process backend (llguidance), as shipped
    local-thought-none, -400, -200   the same with no cap on the thought, or 400 or 200 chars
    server                 the openai backend against `python -m llama_cpp.server` serving the
                           same GGUF, in schema mode, as shipped (no repetition penalty, the
                           tool-call form)
    server-shipped         schema mode as round 5 shipped it: the server's temperature and
                           repetition penalty, tool results as the user's words
    server-temp0, server-no-penalty, server-tool-calls   that, with one change of round 6 alone
    server-no-tool-calls   server without the tool-call form
    server-before, server-results-alone, server-whole   server without the two changes of
                           issue 37 that bring its prompt to the in-process one, or with one
                           alone (server_variants.py)
    server-free-first      server asking for a step without the schema's grammar first
                           (`grammar_costly`), as rounds 10 to 18 shipped it
    object, prompt, react  the server in that JSON mode, or with ReAct text
    smolagents             smolagents' ToolCallingAgent on the same server, in its own virtual
                           environment (--smol-python; see smol_runner.py), scored by the same
                           checkers into the same results file

The results file is the eval's checkpoint: run the same command again after a stop and it
goes on; a smolagents run already in it is not run again either. Writes results.jsonl,
report.html and summary.txt (the terminal table and the paired tests against the first
variant).

smolagents' environment needs jsonagent's own dependencies too, since its tools import them:

    python -m venv .venv-smol
    .venv-smol/bin/pip install smolagents==1.26.0 openai pydantic jsonschema json-repair typer
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from contextlib import ExitStack, redirect_stdout
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import ClassVar

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent / "tests" / "e2e")]

from server_variants import SERVER_VARIANTS  # noqa: E402
from tasks import TASKS, Clock, scripted_human  # noqa: E402
from tasks.embedding import answer_text  # noqa: E402

from jsonagent import Agent, AgentConfig, tool  # noqa: E402
from jsonagent.evals import Case, Dataset, Evaluator, Variant  # noqa: E402

BY_ID = {t.id: t for t in TASKS}
WORLDS: dict[str, object] = {}
"""Each embedding task's world (its tools' state) for the run in progress, by case: the
factory makes it, and the check reads what must hold of it afterwards."""


@dataclass(frozen=True)
class Setup:
    """How a variant's agent is built. `config` is AgentConfig fields; `temperature` None is
    the server's own; `penalty` keeps the server's repetition penalty; `keywords` are the
    OpenAIModel's (what the endpoint is declared to do)."""

    where: str = "server"  # local, server or smolagents
    config: tuple = (("json_mode", "schema"), ("tool_calls", True))
    temperature: float | None = 0.0
    penalty: bool = False
    keywords: tuple = ()

    def variant(self, name: str) -> Variant:
        return Variant(name=name, temperature=self.temperature, config=dict(self.config))


_PLAIN = (("json_mode", "schema"), ("tool_calls", False))
VARIANTS: dict[str, Setup] = {
    "local": Setup("local", ()),
    "local-thought-none": Setup("local", (("thought_max_chars", None),)),
    "local-thought-400": Setup("local", (("thought_max_chars", 400),)),
    "local-thought-200": Setup("local", (("thought_max_chars", 200),)),
    "server": Setup(),
    "server-shipped": Setup(config=_PLAIN, temperature=None, penalty=True),
    "server-temp0": Setup(config=_PLAIN, penalty=True),
    "server-no-penalty": Setup(config=_PLAIN, temperature=None),
    "server-tool-calls": Setup(temperature=None, penalty=True),
    "server-no-tool-calls": Setup(config=_PLAIN),
    "object": Setup(config=(("json_mode", "object"),)),
    "prompt": Setup(config=(("json_mode", "prompt"),)),
    "react": Setup(config=(("prompt_style", "react"), ("json_mode", None))),
    **{name: Setup(keywords=tuple(kw.items())) for name, (kw, _) in SERVER_VARIANTS.items()
       if name != "server"},
    "smolagents": Setup("smolagents", ()),
}


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
        return passed, "" if passed else _why(result.status, result.error, held, answer, task)


@dataclass
class FirstTry(Evaluator):
    """Whether every reply of the run held on its first try (1) or not (0), with the counts
    as its reason: replies that broke, and those written without a costly grammar that were
    asked for again under it. Its threshold of 0 leaves the verdict to the task's check."""

    kind: ClassVar[str] = "first_try"
    threshold: float = 0.0

    def check(self, case, outcome):
        stats = outcome.result.stats
        broke = stats.invalid_replies + stats.grammar_reasks
        return float(broke == 0), (f"{stats.model_calls} replies, {stats.invalid_replies} "
                                   f"invalid, {stats.grammar_reasks} asked again under the "
                                   "grammar")


def _why(status: str, error: str | None, held: bool, answer: str, task) -> str:
    return (f"{status}: {error}" if status != "completed" else "what must hold did not"
            if not held else f"answer {answer[:160]!r}, expected {task.expected!r}")


def dataset(kinds: set[str] | None, ids: list[str] | None) -> Dataset:
    tasks = [t for t in TASKS if (not kinds or t.kind in kinds) and (not ids or t.id in ids)]
    return Dataset(cases=[Case(input=t.question, name=t.id, tags=[t.kind]) for t in tasks],
                   evaluators=[TaskCheck(), FirstTry()])


@functools.cache
def model_for(setup: Setup, gguf: str, base_url: str | None, n_ctx: int):
    """One model a setup, loaded once for the whole benchmark: the local variants, which
    differ in their AgentConfig only, share the one in-process model."""
    if setup.where == "local":
        from jsonagent.models.local import LocalConfig, LocalModel

        # No system prompt loaded from disk (`models/kvcache.py`): the server, started afresh,
        # evaluates each task's system prompt once, and so does this. Through round 13 the
        # in-process rows loaded every task's system prompt that the round before had saved
        # in the user's home, which made their first steps seconds faster than an agent's
        # first run is, and the comparison depend on what ran earlier.
        return LocalModel(gguf, LocalConfig(n_ctx=n_ctx, temperature=setup.temperature,
                                            kv_cache=False))
    from jsonagent.models.openai import OpenAIModel

    model = OpenAIModel(Path(gguf).stem, base_url=base_url, api_key="sk-local",
                        temperature=setup.temperature, **dict(setup.keywords))
    if setup.penalty:
        model.sampling_extra = {}  # the server's own repetition penalty (1.1 on llama.cpp's)
    return model


def factory(gguf: str, base_url: str | None, max_steps: int, n_ctx: int = 8192, wrap=None):
    """`wrap(model, variant)` may put something between a variant's model and the agent."""
    def build(case: Case, variant: Variant) -> Agent:
        task = BY_ID[case.name]
        extra = {}
        if task.embed is not None:
            world = WORLDS[case.name] = task.embed()
            from jsonagent.tools.toolset import core_tools

            own = [tool(fn, confirm=fn.__name__ in world.confirm) for fn in world.tools]
            extra = {"tools": [*core_tools(), *own], "output_type": world.output,
                     "approve": world.approve}  # by default the person refuses every call put
        model = model_for(_model_part(VARIANTS[variant.name]), gguf, base_url, n_ctx)
        return Agent(model=wrap(model, variant) if wrap else model, max_steps=max_steps,
                     ask_human=scripted_human(task), config=AgentConfig(**variant.config),
                     **extra)
    return build


def _model_part(setup: Setup) -> Setup:
    """What of a setup makes its model (not its AgentConfig fields)."""
    return Setup(setup.where, (), setup.temperature, setup.penalty, setup.keywords)


def run_smolagents(ds: Dataset, repeat: int, out: Path, server, args) -> None:
    """smolagents' runs of the cases not yet in `out`, appended to it as the eval's lines."""
    from jsonagent.batch import TaskResult, read_results
    from jsonagent.evals.report import FAIL, PASS

    done = {r["id"] for r in read_results(out)}
    for r in range(repeat):
        todo = [c.name for c in ds.cases if f"smolagents/{c.name}#{r}" not in done]
        if not todo:
            continue
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as lines:
            subprocess.run([args.smol_python, str(HERE / "smol_runner.py"), "--base-url",
                            server.base_url, "--model", Path(server.model).stem, "--max-steps",
                            str(args.max_steps), "--out", lines.name, *todo],
                           env={**os.environ, "PYTHONPATH": str(HERE.parent)}, check=False)
            records = [json.loads(x) for x in Path(lines.name).read_text().splitlines() if x]
        with out.open("a", encoding="utf-8") as f:
            for rec in records:
                line = TaskResult(
                    id=f"smolagents/{rec['task']}#{r}", status=rec["status"], seconds=rec["seconds"],
                    answer=rec["answer"], error=rec["error"], steps=rec["steps"],
                    usage={"prompt_tokens": rec["prompt_tokens"],
                           "completion_tokens": rec["completion_tokens"]},
                    extra={"variant": "smolagents", "case": rec["task"], "repeat": r,
                           "tags": [rec["kind"]], "verdict": PASS if rec["success"] else FAIL,
                           "why": None if rec["success"] else _why(
                               rec["status"], rec["error"], True, rec["answer"], BY_ID[rec["task"]]),
                           "model": f"smolagents {rec.get('version', '')}".strip(),
                           "sampling": {"temperature": 0.0}, "dataset": ds.hash,
                           "trace": rec.get("trace", [])})
                f.write(line.line() + "\n")


def main() -> None:
    from llama_server import LlamaServer

    from jsonagent.batch import read_results
    from jsonagent.cli.batch import _Progress
    from jsonagent.models import catalog

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="catalog name or .gguf path")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--kinds", default="", help="task kinds (comma-separated); default all")
    p.add_argument("--tasks", nargs="*", help="task ids; default all of the kinds")
    p.add_argument("--variants", default="local,server",
                   help=f"comma-separated, the first is the baseline; from {','.join(VARIANTS)}")
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--smol-python",
                   default=os.environ.get("SMOL_PYTHON", ".venv-smol/bin/python"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--join", type=Path, nargs="+", metavar="DIR",
                   help="run nothing: report the runs of these output directories as one "
                        "benchmark (each ran some task kinds as its own dataset) into --out")
    args = p.parse_args()
    names = [v for v in args.variants.split(",") if v]
    if unknown := [v for v in names if v not in VARIANTS]:
        p.error(f"unknown variants: {', '.join(unknown)}")
    # a `timeout` or a kill ends us through the finally blocks: the server goes with us
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    gguf = str(catalog.path(args.model) if args.model in catalog.CATALOG else Path(args.model))
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    ds = dataset(set(filter(None, args.kinds.split(","))), args.tasks)
    if args.join:
        files = [d / "results.jsonl" for d in args.join]
        lines = [r for f in files for r in read_results(f)]
        return _report(lines, names, ds, args, gguf, ", ".join(map(str, files)))
    ours = [VARIANTS[n].variant(n) for n in names if VARIANTS[n].where != "smolagents"]
    with ExitStack() as held:
        server = None
        if any(VARIANTS[n].where != "local" for n in names):
            server = held.enter_context(LlamaServer(gguf, n_ctx=args.n_ctx,
                                                    log=args.out / "server.log"))
        build = factory(gguf, server.base_url if server else None, args.max_steps, args.n_ctx)
        if ours:
            with _Progress(len(ds.cases) * len(ours) * args.repeat, "eval",
                           lambda r: (r.extra or {}).get("verdict") == "fail") as bar:
                ds.run(build, results, repeat=args.repeat, variants=ours, on_result=bar.advance)
        if "smolagents" in names:
            run_smolagents(ds, args.repeat, results, server, args)
    _report(read_results(results), names, ds, args, gguf, str(results))


def _report(lines, names: list[str], ds: Dataset, args, gguf: str, source: str) -> None:
    """The report of `ds`'s runs of `names` in `lines`: report.html and summary.txt in --out."""
    from jsonagent.cli.evals import print_report
    from jsonagent.evals.html import render
    from jsonagent.evals.report import Report

    cases = {c.name for c in ds.cases}
    report = Report.from_lines([r for r in lines
                                if r["extra"]["variant"] in names and r["extra"]["case"] in cases
                                and r["extra"]["repeat"] < args.repeat],
                               source=source, variants=names, cases=[c.name for c in ds.cases])
    title = f"{Path(gguf).stem}: {len(report.runs)} runs of {len(ds.cases)} bench tasks"
    (args.out / "report.html").write_text(render(report, title=title))
    table = io.StringIO()
    with redirect_stdout(table):
        print_report(report, title)
    (args.out / "summary.txt").write_text(table.getvalue())
    print(table.getvalue(), end="")


if __name__ == "__main__":
    main()
