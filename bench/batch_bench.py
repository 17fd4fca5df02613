"""Batch throughput with a scripted model: tasks/s and overhead per task, by backend.

    python bench/batch_bench.py [--tasks 1000] [--chart bench/results/batch.png]

Each task is a two-step scripted run (a GetTimeTools call, then the answer), built the way
the CLI builds it (`RunOptions.build_agent`, `scripted:FILE`). Overhead per task is the
worker time not spent inside the task: (wall time x slots - sum of task seconds) / tasks,
so it holds process start-up, dispatch, pickling and the results file. Ray runs on a local
Ray with 2 CPUs, started before the clock (its own start-up is printed apart).
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from pathlib import Path


def workload(tmp: Path, n: int, task_ms: float) -> tuple[Path, object]:
    from jsonagent.cli.options import RunOptions
    from jsonagent.testing import step

    tools = []
    first = step("GetTimeTools", {"timezone": "UTC"})
    if task_ms:  # stands for a model's latency: the worker waits, the CPU is free
        (tmp / "napper.py").write_text("import time\n\ndef nap(ms):\n    time.sleep(ms / 1000)\n"
                                       "    return 'rested'\n")
        spec = tmp / "nap.json"
        spec.write_text(json.dumps([{"name": "Nap", "description": "Wait.", "handler": "napper:nap",
                                     "parameters": {"type": "object",
                                                    "properties": {"ms": {"type": "number"}}}}]))
        tools, first = [spec], step("Nap", {"ms": task_ms})
    script = tmp / "script.json"
    script.write_text(json.dumps([json.dumps(first),
                                  json.dumps(step("TaskCompleteTool", {"output": "done"}))]))
    tasks = tmp / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "input": f"task {i}"}) + "\n"
                             for i in range(n)))
    opts = RunOptions(model=f"scripted:{script}", tools=tools)
    return tasks, functools.partial(RunOptions.build_agent, opts)


def measure(label: str, tasks: Path, factory, out: Path, slots: int, **kw) -> dict:
    from jsonagent.batch import read_results, run_batch

    stamps: list[float] = []
    t0 = time.perf_counter()
    summary = run_batch(tasks, out, factory, workers=slots,
                        on_result=lambda r: stamps.append(time.perf_counter()), **kw)
    wall = time.perf_counter() - t0
    lines = read_results(out)
    assert summary.all_completed and len(lines) == summary.total, summary
    n, inside = len(lines), sum(r["seconds"] for r in lines)
    row = {"backend": label, "tasks": n, "wall_s": wall, "tasks_per_s": n / wall,
           "in_task_ms": inside / n * 1e3, "overhead_ms": (wall * slots - inside) / n * 1e3,
           "first_result_s": stamps[0] - t0,
           "steady_tasks_per_s": (n - 1) / (stamps[-1] - stamps[0]) if n > 1 else None}
    print(f"{label:<10} {row['tasks_per_s']:7.1f} tasks/s  overhead {row['overhead_ms']:6.2f} "
          f"ms/task  (in task {row['in_task_ms']:4.2f} ms; wall {wall:5.2f} s; first result "
          f"after {row['first_result_s']:4.2f} s, then {row['steady_tasks_per_s']:6.1f} tasks/s)",
          flush=True)
    return row


def chart(rows: list[dict], path: Path, title: str = "") -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no chart)")
        return
    labels = [r["backend"] + (f"\n(+{r['ray_init_s']:.0f} s ray.init)" if "ray_init_s" in r else "")
              for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3), dpi=120)
    bars = ax.bar(labels, [r["tasks_per_s"] for r in rows],
                  color=["#4c72b0", "#55a868", "#c44e52"][:len(rows)])
    ax.bar_label(bars, fmt="%.0f")
    ax.set_ylabel("tasks/s")
    ax.set_title(f"jsonagent batch: {rows[0]['tasks']} scripted tasks{title}, 2 shared cores",
                 fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"chart: {path}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--chart", type=Path, default=None, help="write a PNG of tasks/s here")
    parser.add_argument("--task-ms", type=float, default=0,
                        help="each task also waits this long in a tool, as for a model's reply")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="batch-bench-"))
    tasks, factory = workload(tmp, args.tasks, args.task_ms)
    print(f"{args.tasks} scripted tasks, 2 steps each" +
          (f", {args.task_ms:g} ms of waiting in each" if args.task_ms else ""))
    rows = [measure("local, 1", tasks, factory, tmp / "local1.jsonl", 1),
            measure("local, 2", tasks, factory, tmp / "local2.jsonl", 2)]
    if not args.no_ray:
        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level="WARNING")
        init_s = time.perf_counter() - t0
        print(f"(ray.init: {init_s:.2f} s, not counted)")
        try:
            rows.append(measure("ray, 2", tasks, factory, tmp / "ray.jsonl", 2, backend="ray"))
            rows[-1]["ray_init_s"] = init_s
        finally:
            ray.shutdown()
    if args.chart:
        chart(rows, args.chart, f", {args.task_ms:g} ms wait each" if args.task_ms else "")


if __name__ == "__main__":
    main()
