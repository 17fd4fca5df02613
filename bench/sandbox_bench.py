"""Sandbox latency: cold start, warm round trip for `pass`, and a cell that prints 1 MB.

    python bench/sandbox_bench.py [--runs 30]

Targets (benchmarks, not tests): warm round trip < 2 ms, cold start < 150 ms.
Cold start is `Sandbox()` plus the first `run("pass")`: spawning the interpreter,
entering the namespaces, mounting, confining the worker and one call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _stats(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered) * 1000:8.2f} ms   p95 {p95 * 1000:8.2f} ms   (n={len(ordered)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from jsonagent.bundled import sandbox
    Sandbox = sandbox.Sandbox

    cold, close = [], []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        box = Sandbox()
        box.run("pass")
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        box.close()
        close.append(time.perf_counter() - t0)

    warm, megabyte = [], []
    with Sandbox() as box:
        print(box.isolation.describe(), end="\n\n")
        for _ in range(20):
            box.run("pass")
        for _ in range(args.runs * 20):
            t0 = time.perf_counter()
            box.run("pass")
            warm.append(time.perf_counter() - t0)
        box.run("line = 'x' * 1023")
        for _ in range(args.runs):
            t0 = time.perf_counter()
            result = box.run("print('\\n'.join([line] * 1024))", )
            megabyte.append(time.perf_counter() - t0)
        assert result.stdout_bytes == 1024 * 1024, result.stdout_bytes

    print(f"cold start (Sandbox() + run('pass'))  {_stats(cold)}")
    print(f"warm round trip run('pass')           {_stats(warm)}")
    print(f"print 1 MB (64 KB kept)               {_stats(megabyte)}")
    print(f"close()                               {_stats(close)}")


if __name__ == "__main__":
    main()
