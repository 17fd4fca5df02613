"""Where `llama_cpp.server`'s seconds went in a benchmark run, from its own log (the
server.log that bench/eval_tasks.py writes beside the results): prompt evaluation and token
generation, totalled over the run's requests.

    python bench/server_timings.py DIR/server.log [DIR/results.jsonl]

With the results file it divides by the server rows' steps, and gives each variant's seconds
a step (its runs' seconds over their steps), against the file's first variant. The prompt
tokens are llama.cpp's own count for each request; through round 13 they were read from the
prefix-match lines, which the server's first request has not (its seconds were counted all
the same). That first request's prompt time reads 0 ms there, so its total less its
generation stands for it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REQUEST = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens[^\n]*\n"
                     r"[^\n]* eval time =\s+([\d.]+) ms /\s+(\d+) runs[^\n]*\n"
                     r"[^\n]*total time =\s+([\d.]+) ms")


def main() -> None:
    text = Path(sys.argv[1]).read_text(errors="replace")
    requests = [tuple(map(float, m)) for m in REQUEST.findall(text)]
    # the server's first request says its prompt took 0 ms: its total less its generation
    prompt_s = sum(p if p >= 1 or n <= 1 else total - e for p, n, e, _, total in requests) / 1000
    fed = int(sum(n for _, n, _, _, _ in requests))
    runs = [(e, int(r)) for _, _, e, r, _ in requests]
    eval_s, tokens = sum(ms for ms, _ in runs) / 1000, sum(n for _, n in runs)
    print(f"{len(runs)} requests: prompt evaluated {fed} tokens in {prompt_s:.1f} s "
          f"({1000 * prompt_s / max(fed, 1):.0f} ms a token); generated {tokens} tokens in "
          f"{eval_s:.1f} s ({1000 * eval_s / max(tokens, 1):.1f} ms a token)")
    if len(sys.argv) > 2:
        rows = [json.loads(line) for line in Path(sys.argv[2]).read_text().splitlines()]
        steps = sum(r["steps"] for r in rows if r["extra"]["variant"].startswith("server"))
        print(f"a step of the server rows ({steps} steps): {prompt_s / steps:.2f} s of prompt, "
              f"{eval_s / steps:.2f} s of generation, {fed / steps:.0f} prompt and "
              f"{tokens / steps:.0f} generated tokens")
        totals: dict[str, tuple[float, int]] = {}
        for r in rows:
            seconds, taken = totals.get(r["extra"]["variant"], (0.0, 0))
            totals[r["extra"]["variant"]] = (seconds + r["seconds"], taken + r["steps"])
        per_step = {name: s / n for name, (s, n) in totals.items() if n}
        first = next(iter(per_step.values()), 0.0) or 1.0
        print("seconds a step, from the results: " + ", ".join(
            f"{name} {x:.2f} ({x / first:.2f}x)" for name, x in per_step.items()))


if __name__ == "__main__":
    main()
