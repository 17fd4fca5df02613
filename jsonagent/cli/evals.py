"""`jsonagent eval`: the thin commands over `jsonagent.evals`. `eval DATASET` runs a dataset
(`eval run DATASET`, spelled out); `eval compare OLD NEW` compares two results files."""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from typer.core import TyperGroup

from .batch import _Progress, say_repeats
from .command import PlainCommand
from .exits import fail, guarded
from ..config import REPLY_TOKENS
from .options import (A2aOpt, ApiKeyOpt, BackendChoice, BackendOpt, BaseUrlOpt,
                      CheckAnswersOpt, ConfirmCodeOpt, FallbackOnInvalidOpt, FallbackOpt,
                      JsonModeOpt, LimitOpt, MaxContextTokensOpt, MaxStepsOpt, McpConfigOpt,
                      McpOpt, McpPrefixOpt, NoCoreToolsOpt, NoKvCacheOpt, OtelOpt,
                      ParallelCallsOpt, PromptStyleChoice, PromptStyleOpt, RayAddressOpt,
                      ReplyTokensOpt, RetriesOpt, RunOptions, SandboxChoice, SandboxOpt,
                      TaskTimeoutOpt, TemperatureOpt, ToolsOpt, WorkersOpt, tool_sources,
                      usage_limits)

if TYPE_CHECKING:
    from ..evals import Case, Report, Variant

class _RunByDefault(TyperGroup):
    """`jsonagent eval DATASET ...` is `jsonagent eval run DATASET ...`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_RunByDefault, no_args_is_help=True, rich_markup_mode=None,
                  short_help="Measure an agent on a dataset; compare two results.",
                  help="Measure an agent on a dataset.\n\njsonagent eval DATASET [OPTIONS] "
                       "runs it (eval run, spelled out); jsonagent eval compare OLD NEW "
                       "compares two results files. Exit codes: 0 done, 1 a gate failed "
                       "(--fail-under, --fail-on-regression), 2 a bad dataset, results file "
                       "or option, 130 interrupted.")

ModelsOpt = Annotated[Optional[list[str]], typer.Option(
    "--model", "-m", metavar="NAME",
    help="A model to run the cases with (repeatable: one variant each), as run takes it. "
         "Default: the dataset's variants, else $JSONAGENT_MODEL.")]


@app.command("run", cls=PlainCommand,
             short_help="Run a dataset's cases for each variant and print the pass rates.")
@guarded
def run(ctx: typer.Context,
        dataset: Annotated[Path, typer.Argument(metavar="DATASET",
                                                help="Cases, as YAML or JSONL.")],
        output: Annotated[Optional[Path], typer.Option(
            "--output", "-o", metavar="RESULTS.jsonl",
            help="One line a run, written as each ends; runs already there are not run "
                 "again. Default: DATASET's name with .results.jsonl.")] = None,
        repeat: Annotated[int, typer.Option("--repeat", "-n", min=1, metavar="N",
                                            help="Runs of each case per variant.")] = 1,
        report: Annotated[Optional[Path], typer.Option(
            "--report", metavar="REPORT.html", help="Write a self-contained HTML report.")] = None,
        fail_under: Annotated[Optional[float], typer.Option(
            "--fail-under", min=0.0, max=1.0, metavar="RATE",
            help="Exit 1 when a variant's pass rate is below RATE (0 to 1).")] = None,
        workers: WorkersOpt = None, backend: BackendOpt = BackendChoice.local,
        ray_address: RayAddressOpt = None, task_timeout: TaskTimeoutOpt = None,
        transcripts: Annotated[Optional[Path], typer.Option(
            "--transcripts", metavar="DIR", help="Keep one JSONL transcript per run.")] = None,
        retry_errors: Annotated[bool, typer.Option(
            "--retry-errors", help="Run again the runs of --output that ended on an error of "
                                   "the eval (the model endpoint failed, say).")] = False,
        force: Annotated[bool, typer.Option(
            "--force", help="With --retry-errors, run again also the runs whose `once` calls "
                            "began (a payment, an email): those calls happen again.")] = False,
        # the shared run options; RunOptions.of(ctx) gathers them (--model may repeat here)
        tools: ToolsOpt = None, mcp: McpOpt = None, mcp_config: McpConfigOpt = None,
        mcp_prefix: McpPrefixOpt = False, a2a: A2aOpt = None,
        no_core_tools: NoCoreToolsOpt = False,
        model: ModelsOpt = None, base_url: BaseUrlOpt = None, api_key: ApiKeyOpt = None,
        fallback: FallbackOpt = None, retries: RetriesOpt = 3,
        fallback_on_invalid: FallbackOnInvalidOpt = None,
        max_steps: MaxStepsOpt = 10, max_context_tokens: MaxContextTokensOpt = None,
        reply_tokens: ReplyTokensOpt = REPLY_TOKENS,
        parallel_calls: ParallelCallsOpt = 1,
        temperature: TemperatureOpt = None,
        json_mode: JsonModeOpt = None, prompt_style: PromptStyleOpt = PromptStyleChoice.json,
        sandbox: SandboxOpt = SandboxChoice.auto, confirm_code: ConfirmCodeOpt = False,
        no_kv_cache: NoKvCacheOpt = False, otel: OtelOpt = False,
        check_answers: CheckAnswersOpt = None,
        limit: LimitOpt = None):
    """Run every case of DATASET for each variant, score it, and print the pass rates.

    Errors of the eval itself (the model endpoint failed, an evaluator could not score) are
    counted apart and left out of the pass rate. Run the same command again to finish an
    interrupted eval: finished runs are kept. Exit 0 when done, 1 when --fail-under is not
    met or no run could be scored, 2 for a bad dataset or option, 130 when interrupted."""
    from ..errors import ConfigError
    from ..evals import Dataset
    from ..evals.runner import errored, key, repeats, results_of, run as run_eval

    models = list(ctx.params["model"] or [])
    ctx.params["model"] = None  # RunOptions holds one model; the variants hold the others
    opts = RunOptions.of(ctx)
    data = Dataset.load(dataset)
    variants = _variants(data, models)
    default_model = models[0] if len(models) == 1 else None
    opts = opts.model_copy(update={"model": default_model})  # for variants that name none
    _preflight(opts, data, variants)
    if report is not None and not report.resolve().parent.is_dir():
        raise ConfigError(f"--report {report}: no such directory {report.resolve().parent}")
    out = output or dataset.with_suffix(".results.jsonl")
    done = {r["id"] for r in results_of(out, data)}  # each line checked before any is read
    say_repeats("--retry-errors", retry_errors, force, repeats(out))
    if retry_errors and done:
        done -= errored(out, force)
    todo = sum(key(v.name, c.name, r) not in done
               for v in variants for c in data.cases for r in range(repeat))
    try:
        with _Progress(todo, "eval", lambda r: (r.extra or {}).get("verdict") == "fail") \
                if todo and sys.stderr.isatty() else contextlib.nullcontext() as bar:
            result = run_eval(data, functools.partial(case_agent, opts), out, repeat=repeat,
                              variants=variants, workers=workers or 1, backend=backend.value,
                              ray_address=ray_address, task_timeout=task_timeout,
                              transcripts=transcripts, model=default_model,
                              retry_errors=retry_errors, force=force,
                              on_result=bar.advance if bar else None)
    except KeyboardInterrupt:
        fail(f"interrupted; the finished runs are in {out}: run the same command again to "
             "finish", 130)
    errors = sum(r.verdict == "error" for r in result.runs)
    print_report(result, _ran(out, len(result.runs), todo, sum(
        r.verdict == "error" for r in result.runs if key(r.variant, r.case, r.repeat) in done)))
    if errors:
        held = len(repeats(out))
        typer.echo(f"{errors} run{'s' * (errors != 1)} ended on an error of the eval (its "
                   f"\"why\" in {out} says what); --retry-errors runs "
                   f"{'it' if errors == 1 else 'them'} again"
                   + (f" ({held} only with --force: {'its' if held == 1 else 'their'} once "
                      "calls would happen again)" if held else ""), err=True)
    if report is not None:
        _write_html(result, report, data.path)
    gate = _below(result, fail_under)
    if gate:
        fail(gate, 1)
    if result.runs and errors == len(result.runs):  # not a pass, even without --fail-under
        fail(f"no run of {out} was scored: each ended on an error of the eval", 1)


def _ran(out: Path, runs: int, todo: int, kept_errors: int) -> str:
    """What the eval ran now, and what it kept of `out`: a run that ended on an error of
    the eval is kept, not run again, unless --retry-errors says so."""
    said = f"{out}: {runs} run{'s' * (runs != 1)}, {todo} run now"
    if runs > todo:
        said += f", {runs - todo} done before"
    if kept_errors:
        one = kept_errors == 1
        said += f" ({kept_errors} ended on an error of the eval and {'was' if one else 'were'} " \
                f"kept: --retry-errors runs {'it' if one else 'them'} again)"
    return said


def _variants(data, models: list[str]) -> list[Variant]:
    from ..errors import ConfigError
    from ..evals import Variant

    if data.variants and len(models) > 1:
        raise ConfigError("the dataset has variants: give at most one --model (the model of "
                          "variants that name none), or remove its variants block")
    if data.variants:
        return data.variants
    return [Variant(name=m, model=m) for m in models] or [Variant(name="default")]


def _preflight(opts: RunOptions, data, variants: list[Variant]) -> None:
    """What would make every run fail the same way is a usage error, found before anything
    runs: a variant without a model or with a script that does not load, a tool spec that
    does not load, a bad --limit, a cost limit on a model whose price is unknown."""
    import os

    from ..errors import ConfigError
    from ..models import resolve_model
    from ..tools.toolset import Toolset

    for v in variants:
        spec = v.model or opts.model or os.environ.get("JSONAGENT_MODEL")
        if not spec:
            raise ConfigError(f"variant {v.name} has no model: pass --model NAME, give the "
                              "variant a model, or set JSONAGENT_MODEL")
        for each in [spec, *opts.fallback]:
            if each.startswith("scripted:"):  # its file is read here once, as each run would
                try:
                    resolve_model(each)
                except ConfigError as exc:
                    raise ConfigError(f"variant {v.name}: {exc}") from None
    for tools in {tuple(c.tools) for c in data.cases} | {()}:
        Toolset.build([*opts.tools, *map(Path, tools)]).close()
    limits = usage_limits(opts.limit)
    if limits.cost is not None:  # a variant whose price is unknown would never reach it
        from ..pricing import known_or_refused

        for v in variants:  # nor one of its fallbacks, which may answer in its place
            for spec in [v.model or opts.model, *opts.fallback]:
                known_or_refused(_model(spec, v.base_url or opts.base_url, opts.api_key,
                                        not opts.no_kv_cache, None), limits.cost)


def _below(report: Report, rate: float | None) -> str | None:
    if rate is None:
        return None
    for s in report.summaries():
        if s.rate is None:
            return f"--fail-under {rate:g}: {s.variant} has no scored run (only errors)"
        if s.rate < rate:
            return f"--fail-under {rate:g}: {s.variant} passes {s.rate:.1%} " \
                   f"({s.passed} of {s.passed + s.failed})"
    return None


def _write_html(report: Report, path: Path, dataset: Path | None) -> None:
    from ..errors import ConfigError
    from ..evals.html import render

    try:
        path.write_text(render(report, title=f"eval of {dataset.name if dataset else ''}"),
                        encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    typer.echo(f"report: {path}", err=True)


@app.command("compare", cls=PlainCommand,
             short_help="Compare two results files: the flips and the paired test.")
@guarded
def compare(old: Annotated[Path, typer.Argument(metavar="OLD.jsonl", help="Results before.")],
            new: Annotated[Path, typer.Argument(metavar="NEW.jsonl", help="Results after.")],
            fail_on_regression: Annotated[bool, typer.Option(
                "--fail-on-regression",
                help="Exit 1 when NEW is significantly worse than OLD (p < 0.05).")] = False):
    """Compare two results files of the same dataset, variant by variant: the cases that
    flipped, both ways, and whether the difference is more than noise.

    Variants are paired by name (a file with a single variant pairs with the other's single
    one). Exit 0, or 1 with --fail-on-regression when NEW is significantly worse; 2 for an
    unreadable file."""
    from ..errors import ConfigError
    from ..evals import Report

    before, after = Report.from_file(old), Report.from_file(new)
    pairs = [(v, v) for v in before.variants if v in after.variants]
    if not pairs and len(before.variants) == len(after.variants) == 1:
        pairs = [(before.variants[0], after.variants[0])]
    if not pairs:
        raise ConfigError(f"no variant in common between {old} ({', '.join(before.variants)}) "
                          f"and {new} ({', '.join(after.variants)})")
    if before.datasets != after.datasets:
        typer.echo(f"note: OLD and NEW are of different datasets ({', '.join(before.datasets)} "
                   f"and {', '.join(after.datasets)}): cases are paired by name", err=True)
    worse = []
    for a, b in pairs:
        c = before.compare(a, b, after, labels=("OLD", "NEW"))
        label = a if a == b else f"{a} -> {b}"
        typer.echo(f"{label}: {_rate(before.summary(a))} -> {_rate(after.summary(b))}")
        for name, cases in (("now fail", c.a_only), ("now pass", c.b_only)):
            if cases:
                typer.echo(f"  {name} ({len(cases)}): {', '.join(cases)}")
        typer.echo("  " + c.sentence)
        for name, (ma, mb, p) in c.scores.items():
            typer.echo(f"  {name}: mean {ma:.2f} -> {mb:.2f} (p = {p:.2g})")
        if c.worse:
            worse.append(label)
    if fail_on_regression and worse:
        fail(f"NEW is significantly worse than OLD: {', '.join(worse)}", 1)


def _rate(s) -> str:
    if s.rate is None:
        return f"no scored run ({s.errors} errors)"
    errors = f", {s.errors} errors" if s.errors else ""
    return f"{s.rate:.0%} [{s.low:.0%}, {s.high:.0%}] ({s.passed}/{s.passed + s.failed}{errors})"


def print_report(report: Report, title: str) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left", caption_justify="left", box=box.SIMPLE_HEAD,
                  caption="pass rate: of the runs scored; errors (the model endpoint failed, "
                          "an evaluator could not score) are left out of it")
    summaries = report.summaries()
    k = max((s.repeats for s in summaries), default=1)
    table.add_column("variant", overflow="fold")
    for name in ("pass rate", "95% CI", "pass", "fail", "errors",
                 *((f"pass@{k}", f"pass^{k}") if k > 1 else ()), "steps", "s", "tokens",
                 "cost"):
        table.add_column(name, justify="right", no_wrap=True)
    for s in summaries:
        rate = "-" if s.rate is None else f"{s.rate:.1%}"
        table.add_row(s.variant, rate, f"{s.low:.2f}-{s.high:.2f}", str(s.passed),
                      str(s.failed), str(s.errors),
                      *((_num(s.pass_at.get(k), "{:.2f}"), _num(s.pass_hat.get(k), "{:.2f}"))
                        if k > 1 else ()),
                      _num(s.median_steps, "{:g}"), _num(s.median_seconds, "{:.1f}"),
                      _num(s.median_tokens, "{:.0f}"), _num(s.cost, "${:.4f}"))
    # a file or a pipe gets the whole table, not 80 columns of it
    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 120)
    console.print(table)
    for s in summaries:
        scores = ", ".join(f"{name} {v:.2f}" for name, v in s.scores.items())
        sampling = ", ".join(f"{k} {v}" for k, v in (s.sampling or {}).items())
        console.print(f"{s.variant}: model {s.model or '-'}" +
                      (f" ({sampling})" if sampling else "") +
                      (f"; mean scores: {scores}" if scores else ""),
                      markup=False, highlight=False)
        tags = ", ".join(f"{tag} {p}/{n}" for tag, (p, n) in report.by_tag(s.variant).items())
        if tags:
            console.print(f"  passed by tag: {tags}", markup=False, highlight=False)
    for other in report.variants[1:]:
        console.print(report.compare(report.variants[0], other).sentence, markup=False,
                      highlight=False)


def _num(value, form: str) -> str:
    return "-" if value is None else form.format(value)


# -- the agent of each run ------------------------------------------------------------------

def case_agent(opts: RunOptions, case: Case, variant: Variant):
    """The agent for one run: the command's options, the variant's settings over them, and
    what the case needs (its tools, scripted person, approvals, answer type, step limit)."""
    from ..agent import Agent
    from ..config import AgentConfig
    if opts.otel:
        from .. import tracing

        tracing.switch_on()
    settings = opts.settings()
    settings.update(variant.config)
    if case.max_steps is not None:
        settings["max_steps"] = case.max_steps
    temperature = variant.temperature if variant.temperature is not None else opts.temperature
    # the variant's model (or --model), then each --fallback, as `run` takes them
    model = [_model(spec, variant.base_url or opts.base_url, opts.api_key, not opts.no_kv_cache,
                    temperature) for spec in [variant.model or opts.model, *opts.fallback]]
    tools = tool_sources([*opts.tools, *map(Path, case.tools)], [*opts.mcp, *case.mcp],
                         [*opts.mcp_config, *map(Path, case.mcp_config)], opts.mcp_prefix,
                         opts.no_core_tools, opts.a2a)
    return Agent(model=model, tools=tools, ask_human=case.ask_human(), approve=case.approver(),
                 config=AgentConfig(**settings), output_type=case.answer_type())


@functools.lru_cache(maxsize=8)
def _model(spec, base_url, api_key, kv_cache, temperature):
    """One model per variant in each worker: a local model loads once, not once a run."""
    from ..models import resolve_model

    return resolve_model(spec, base_url=base_url, api_key=api_key, kv_cache=kv_cache,
                         temperature=temperature)
