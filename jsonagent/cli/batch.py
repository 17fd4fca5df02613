"""`jsonagent batch`: the thin command over `jsonagent.batch.run_batch`, the progress bar it
draws on a terminal from each result, and what a retry leaves or repeats (eval's too)."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Optional

import typer

from ..status import COMPLETED
from .exits import guarded, fail
from ..config import REPLY_TOKENS
from .options import (A2aOpt, ApiKeyOpt, BackendChoice, BackendOpt, BaseUrlOpt,
                      CheckAnswersOpt, ConfirmCodeOpt, FallbackOnInvalidOpt, FallbackOpt,
                      JsonModeOpt, LimitOpt, MaxContextTokensOpt, MaxStepsOpt, McpConfigOpt,
                      McpOpt, McpPrefixOpt, ModelOpt, NoCoreToolsOpt, NoKvCacheOpt, OtelOpt,
                      ParallelCallsOpt, PromptStyleChoice, PromptStyleOpt, RayAddressOpt,
                      ReplyTokensOpt, RetriesOpt, RunOptions, SandboxChoice, SandboxOpt,
                      StoreOpt, TaskTimeoutOpt, TemperatureOpt, ToolsOpt, WorkersOpt,
                      usage_limits)

if TYPE_CHECKING:
    from ..batch import TaskResult


@guarded
def batch(ctx: typer.Context,
          tasks: Annotated[Path, typer.Argument(metavar="TASKS.jsonl",
                                                help='One {"id", "input"} object a line.')],
          out: Annotated[Path, typer.Option("--out", metavar="RESULTS.jsonl",
                                            help="Results, one line a task; ids already there "
                                                 "are skipped.")],
          workers: WorkersOpt = None, backend: BackendOpt = BackendChoice.local,
          ray_address: RayAddressOpt = None, task_timeout: TaskTimeoutOpt = None,
          retry_failed: Annotated[bool, typer.Option(
              "--retry-failed", help="Run the failed tasks of --out again, replacing their "
                                     "lines.")] = False,
          force: Annotated[bool, typer.Option(
              "--force", help="With --retry-failed, run again also the tasks whose `once` "
                              "calls began (a payment, an email): those calls happen "
                              "again.")] = False,
          transcripts: Annotated[Optional[Path], typer.Option(
              "--transcripts", metavar="DIR", help="Keep one JSONL transcript per task.")] = None,
          store: StoreOpt = None,
          # the shared run options; RunOptions.of(ctx) gathers them
          tools: ToolsOpt = None, mcp: McpOpt = None, mcp_config: McpConfigOpt = None,
          mcp_prefix: McpPrefixOpt = False, a2a: A2aOpt = None,
          no_core_tools: NoCoreToolsOpt = False,
          model: ModelOpt = None, base_url: BaseUrlOpt = None, api_key: ApiKeyOpt = None,
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
    """Run every task of a JSONL file.

    Re-run the same command to finish an interrupted batch: ids already in --out are skipped.
    Exit 0 when every task completed, 1 when any did not, 2 for a bad task file."""
    import functools

    from ..batch import read_results, read_tasks, repeats, run_batch, to_run
    from ..store import default_store, open_store

    opts = RunOptions.of(ctx)
    if usage_limits(opts.limit).cost is not None:  # an unknown price fails here, once
        opts.build_agent().close()
    where = store or default_store()
    open_store(where).close()  # a bad URL or an unreachable database fails here, once
    try:
        task_list = read_tasks(tasks)
        previous = read_results(out)
        say_repeats("--retry-failed", retry_failed, force, repeats(previous))
        # the bar counts what run_batch will run, so it needs the same count first
        todo = len(to_run(task_list, previous, retry_failed, force)) \
            if sys.stderr.isatty() else 0
        with _Progress(todo) if todo else contextlib.nullcontext() as bar:
            # every task's run is stored, as the CLI's runs are (a paused one is resumable),
            # where this command was told: a PostgreSQL URL reaches Ray workers elsewhere
            build = functools.partial(RunOptions.build_agent, opts, store=str(where))
            summary = run_batch(task_list, out, build,
                                workers=workers, backend=backend.value, ray_address=ray_address,
                                task_timeout=task_timeout, retry_failed=retry_failed,
                                force=force,
                                transcripts=transcripts,
                                on_result=bar.advance if bar else None)
    except KeyboardInterrupt:
        fail(f"interrupted; the finished tasks are in {out}: run the same command again to "
             "finish", 130)
    _print_summary(summary, out)
    raise typer.Exit(0 if summary.all_completed else 1)


def say_repeats(flag: str, retrying: bool, force: bool, runs: dict[str, list[dict]]) -> None:
    """What `flag` (--retry-failed, --retry-errors) leaves alone, or with --force repeats:
    `runs`, the `once` calls each failed run began (batch.repeats). A new run calls them
    under new keys, which no API recognises."""
    from ..errors import ConfigError

    if force and not retrying:
        raise ConfigError(f"--force goes with {flag}: it runs again what that leaves")
    for run_id, calls in runs.items() if retrying else ():
        said = ", ".join(f"{c['tool']} (key {c['key']}, {c.get('ended') or 'no result'})"
                         if c.get("key") else "a once tool perhaps (its worker died where "
                         "the run's calls cannot be read)" for c in calls)
        if force:
            typer.echo(f"--force: {run_id} runs again, and with it {said} again, under a new "
                       "key", err=True)
        else:
            typer.echo(f"{run_id} is not run again: before its error it called {said}; check "
                       "that, then add --force to run it and those calls again", err=True)


def _print_summary(summary, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{out}: {summary.total} tasks, {summary.ran} run now "
                        f"in {summary.seconds:.1f} s", title_justify="left")
    table.add_column("status")
    table.add_column("tasks", justify="right")
    for status, n in sorted(summary.counts.items(), key=lambda kv: -kv[1]):
        table.add_row(status, str(n))
    if summary.missing:
        table.add_row("(no result)", str(summary.missing))
    table.add_section()
    median = "-" if summary.median_seconds is None else f"{summary.median_seconds:.2f}"
    table.add_row("median seconds", median)
    table.add_row("total tokens", f"{summary.total_tokens:,}")
    table.add_row("total cost", "unknown" if summary.cost is None else f"${summary.cost:.4f}")
    if summary.ok_rate is not None:
        table.add_row("ok rate", f"{summary.ok_rate:.0%}")
    Console(soft_wrap=True).print(table)


class _Progress:
    """A rich bar on stderr: done, failed, rate and ETA. `failed(result)` says what counts
    as failed (an eval's failed case, say); by default a task that did not complete."""

    def __init__(self, total: int, label: str = "batch",
                 failed: Callable[[TaskResult], bool] | None = None):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self.failed, self.is_failed = 0, failed or (lambda r: r.status != COMPLETED)
        self.start = time.perf_counter()
        self.bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(),
                            TextColumn("[red]{task.fields[failed]} failed"),
                            TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                            TextColumn("ETA"), TimeRemainingColumn(),
                            console=Console(stderr=True), transient=False)
        self.task = self.bar.add_task("batch", total=total, failed=0, rate="")

    def __enter__(self):
        self.bar.start()
        return self

    def __exit__(self, *exc):
        self.bar.stop()

    def advance(self, result: TaskResult) -> None:
        self.failed += self.is_failed(result)
        done = self.bar.tasks[0].completed + 1
        rate = done / max(time.perf_counter() - self.start, 1e-9)
        self.bar.update(self.task, advance=1, failed=self.failed, rate=f"{rate:.1f}/s")
