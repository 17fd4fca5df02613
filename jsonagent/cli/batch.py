"""`jsonagent batch`: the thin command over `jsonagent.batch.run_batch`."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .exits import guarded, fail
from .options import RunOptions, run_options


class BackendChoice(str, Enum):
    local = "local"
    ray = "ray"


@guarded
@run_options
def batch(tasks: Annotated[Path, typer.Argument(metavar="TASKS.jsonl",
                                                help='One {"id", "input"} object a line.')],
          out: Annotated[Path, typer.Option("--out", metavar="RESULTS.jsonl",
                                            help="Results, one line a task; ids already there "
                                                 "are skipped.")],
          workers: Annotated[Optional[int], typer.Option(
              "--workers", "-w", min=1, metavar="N",
              help="Worker processes (local; default 1), or tasks in flight (ray; default "
                   "the cluster's CPUs).")] = None,
          backend: Annotated[BackendChoice, typer.Option("--backend")] = BackendChoice.local,
          ray_address: Annotated[Optional[str], typer.Option(
              "--ray-address", metavar="ADDR",
              help="Ray cluster to use. Default: start a local Ray.")] = None,
          task_timeout: Annotated[Optional[float], typer.Option(
              "--task-timeout", min=0.001, metavar="SECONDS",
              help="Give up on a task after this long; it is recorded as failed.")] = None,
          retry_failed: Annotated[bool, typer.Option(
              "--retry-failed", help="Run the failed tasks of --out again, replacing their "
                                     "lines.")] = False,
          transcripts: Annotated[Optional[Path], typer.Option(
              "--transcripts", metavar="DIR", help="Keep one JSONL transcript per task.")] = None,
          *, opts: RunOptions):
    """Run every task of a JSONL file.

    Re-run the same command to finish an interrupted batch: ids already in --out are skipped.
    Exit 0 when every task completed, 1 when any did not, 2 for a bad task file."""
    import functools

    from ..batch import run_batch

    try:
        summary = run_batch(tasks, out, functools.partial(RunOptions.build_agent, opts),
                            workers=workers, backend=backend.value, ray_address=ray_address,
                            task_timeout=task_timeout, retry_failed=retry_failed,
                            transcripts=transcripts, progress=sys.stderr.isatty())
    except KeyboardInterrupt:
        fail(f"interrupted; the finished tasks are in {out}: run the same command again to "
             "finish", 130)
    _print_summary(summary, out)
    raise typer.Exit(0 if summary.all_completed else 1)


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
    if summary.ok_rate is not None:
        table.add_row("ok rate", f"{summary.ok_rate:.0%}")
    Console(soft_wrap=True).print(table)
