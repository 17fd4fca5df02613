"""Running an eval: every (variant, case, repeat) is one task of a batch, keyed so, and its
line in the results file carries the run's scores. The results file is the checkpoint: a
run whose line is there is never run again.

The batch's workers build an `EvalWorker` once (the dataset, the variants, your factory);
`run_case` runs each task on a fresh agent from `factory(case, variant)` and scores it
there, where its RunResult and events are at hand.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from ..batch import (Task, TaskResult, read_results, repeats as batch_repeats, rewrite_without,
                     run_batch, run_task, to_retry)
from ..errors import BatchError, EvalError
from ..status import FAILED
from .case import Case, Variant
from .evaluators import Outcome, Score
from .report import ERROR, FAIL, PASS, Report, line_problem

# `Dataset` is named in annotations only: dataset.py imports this module to run itself
AgentFactory = Callable[[Case, Variant], Any]
"""`factory(case, variant)` -> an Agent for that run. Workers other than `inline` need it to
pickle (a module-level function, or a functools.partial of one)."""

def key(variant: str, case: str, repeat: int) -> str:
    return f"{variant}/{case}#{repeat}"


def run(dataset: Dataset, factory: AgentFactory, out: str | Path | None = None, *,
        repeat: int = 1, variants: list[Variant] | None = None, workers: int | None = None,
        backend: str | None = None, ray_address: str | None = None,
        task_timeout: float | None = None, transcripts: str | Path | None = None,
        model: str | None = None, retry_errors: bool = False, force: bool = False,
        on_result: Callable[[TaskResult], None] | None = None) -> Report:
    """Run each case `repeat` times for each variant (the dataset's, else one named
    "default"); return the Report of every run in `out`.

    `backend` is inline (this process, one run at a time: the default without `workers`),
    local (that many worker processes) or ray. `model` is the model of a variant that names
    none (a judge without a model uses it too). A run that ended on an error of the eval is
    finished like any other, unless `retry_errors` runs it again; one whose `once` calls
    began (a payment, an email) only with `force` too, since they happen again (`repeats`)."""
    if repeat < 1:
        raise EvalError("repeat must be at least 1")
    variants = variants or dataset.variants or [Variant(name="default")]
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise EvalError(f"variant names must be unique: {', '.join(names)}")
    # the keys ride with each task, so that even a run whose worker died has its line
    tasks = [Task(id=key(v.name, c.name, r), input=c.input,
                  extra={"variant": v.name, "case": c.name, "repeat": r, "dataset": dataset.hash})
             for v in variants for c in dataset.cases for r in range(repeat)]
    seen: set[str] = set()
    for t in tasks:  # two cases of one name, or "a/b" + "c" and "a" + "b/c"
        if t.id in seen:
            raise EvalError(f"two runs would have the same key {t.id!r}: give every case and "
                            "every variant a name of its own")
        seen.add(t.id)
    with tempfile.TemporaryDirectory(prefix="jsonagent-eval-") as scratch:
        out = Path(out) if out is not None else Path(scratch) / "results.jsonl"
        results_of(out, dataset)
        if retry_errors and (again := errored(out, force)):
            rewrite_without(out, again)
        worker = functools.partial(EvalWorker, dataset, variants, factory, repeat, model)
        run_batch(tasks, out, worker, workers=workers,
                  backend=backend or ("inline" if workers is None else "local"),
                  ray_address=ray_address, task_timeout=task_timeout, transcripts=transcripts,
                  on_result=on_result, job=run_case)
        wanted = {t.id for t in tasks}
        return Report.from_lines([r for r in read_results(out) if r["id"] in wanted],
                                 source=str(out), variants=names,
                                 cases=[c.name for c in dataset.cases])


def results_of(out: Path, dataset: Dataset) -> list[dict]:
    """The lines of `out`, each checked before any is read: lines of another dataset (or of
    a batch) would be taken as finished runs, and a damaged one is refused by its number,
    with the file as it was (its finished runs are never run again)."""
    def check(line: dict) -> str | None:
        extra = line.get("extra")
        if extra is None or isinstance(extra, dict) and extra.get("dataset") != dataset.hash:
            raise EvalError(f"{out} holds results of another dataset (or no eval's): give "
                            "another output file, or remove it to start over")
        return line_problem(line)

    try:
        return read_results(out, check)
    except BatchError as exc:
        raise EvalError(str(exc)) from None


def _errored(line: dict) -> bool:
    """A run that ended on an error of the eval (a dead worker's has no verdict)."""
    return (line.get("extra") or {}).get("verdict", ERROR) == ERROR


def errored(out: Path, force: bool = False) -> set[str]:
    """The runs of `out` that ended on an error of the eval; without `force`, not those
    whose `once` calls began, as a batch's `retry_failed` (batch.to_retry)."""
    return to_retry(read_results(out), force, _errored)


def repeats(out: Path) -> dict[str, list[dict[str, Any]]]:
    """What running the errored runs of `out` again would repeat, by run (batch.repeats)."""
    return batch_repeats(read_results(out), _errored)


class EvalWorker:
    """What a batch worker builds once: the runs it may be given, and how to make agents."""

    def __init__(self, dataset: Dataset, variants: list[Variant], factory: AgentFactory,
                 repeat: int, model: str | None):
        self.dataset, self.factory, self.model = dataset, factory, model
        self.jobs = {key(v.name, c.name, r): (v, c, r)
                     for v in variants for c in dataset.cases for r in range(repeat)}
        self.shared = list(dataset.evaluators)


def run_case(worker: EvalWorker, task: Task, transcripts: Path | None = None,
             name: str | None = None, timeout: float | None = None) -> TaskResult:
    """The batch's job for an eval: run one case on a fresh agent, then score it."""
    variant, case, repeat = worker.jobs[task.id]
    events: list = []
    try:
        agent = worker.factory(case, variant)
    except Exception as exc:
        line = TaskResult(id=task.id, status=FAILED, worker=name or "",
                          error=f"building the agent failed: {type(exc).__name__}: {exc}")
        return _scored(line, worker, variant, case, repeat, [], None, line.error)
    mine = agent.on_event
    agent.on_event = lambda e: (events.append(e), mine(e) if mine else None)
    try:
        line = run_task(agent, task, transcripts, name, timeout)
        final_tool = agent.toolset.final.name
    finally:
        agent.close()
    end = events[-1] if events and getattr(events[-1], "type", "") == "run_end" else None
    if end is None:  # the run raised before it could end: nothing of the agent's to score
        return _scored(line, worker, variant, case, repeat, events, None,
                       line.error or "the run did not end")
    result = end.result
    if line.status != result.status:  # timed out: run_task says so, the run says interrupted
        result = result.model_copy(update={"status": line.status, "error": line.error})
    outcome = Outcome(result, events, line.seconds, final_tool,
                      model=variant.model or worker.model)
    scores = [e.evaluate(case, outcome) for e in case.checks(worker.shared)]
    return _scored(line, worker, variant, case, repeat, events, scores, _model_failure(result))


def _scored(line: TaskResult, worker: EvalWorker, variant: Variant, case: Case, repeat: int,
            events: list, scores: list[Score] | None, infra: str | None) -> TaskResult:
    from .. import __version__

    scores = scores or []
    broken = infra or next((f"{s.name}: {s.error}" for s in scores if s.error), None)
    start = next((e for e in events if e.type == "run_start"), None)
    sampling = next((e.sampling for e in events if e.type == "model_reply"), None)
    once = (line.extra or {}).get("once")  # run_task's: what a run again repeats (`repeats`)
    line.extra = {
        "variant": variant.name, "case": case.name, "repeat": repeat, "tags": case.tags,
        "verdict": ERROR if broken else PASS if all(s.passed for s in scores) else FAIL,
        "why": broken, "scores": [asdict(s) for s in scores],
        "model": start.model if start else variant.model or worker.model,
        "sampling": sampling, "config": variant.config, "version": __version__,
        "dataset": worker.dataset.hash, "trace": _trace(events),
        **({"once": once} if once else {})}
    return line


def _trace(events: list) -> list[dict]:
    """The run's steps as a person reads them: thought, tool, args, then the observation;
    a step of several calls is an entry a call (its `call`, from 0)."""
    calls: dict[tuple[int, int], dict] = {}
    for e in events:
        if e.type == "step":
            for n, c in enumerate(e.calls or [{"tool": e.tool, "args": e.args}]):
                calls[e.step, n] = {"step": e.step, **({"call": n} if e.calls else {}),
                                    "thought": e.thought, "tool": c["tool"], "args": c["args"]}
        elif e.type == "tool_result" and (e.step, e.call) in calls:
            calls[e.step, e.call].update(observation=_cut(e.observation), error=e.error,
                                         **({"note": e.note} if e.note else {}))
    return list(calls.values())


def _cut(value: Any, limit: int = 4000) -> Any:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return value if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


_THE_RUNS_OWN = {"context_window", "content_filter"}
"""Model failures that the run's own content brought on: scored as the case's outcome."""


def _model_failure(result: Any) -> str | None:
    """A run that ended because the model failed (rate limited, unavailable, a bad key) is
    an error of the eval, never a failed case: the agent was not measured."""
    if result.status == FAILED and result.error_kind and result.error_kind not in _THE_RUNS_OWN:
        return f"the model failed ({result.error_kind}): {result.error}"
    return None
