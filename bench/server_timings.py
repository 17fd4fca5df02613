"""Where `llama_cpp.server`'s seconds went in a benchmark run, from its own log (the
server.log that bench/eval_tasks.py writes beside the results): prompt evaluation and token
generation, totalled over the run's requests.

    python bench/server_timings.py DIR/server.log [DIR/results.jsonl]

With the results file it divides by the server rows' steps, and gives each variant's seconds
a step (its runs' seconds over their steps), against the file's first variant. The prompt
tokens are llama.cpp's own count for each request; through round 13 they were read from the
prefix-match lines, which the server's first request has not (its seconds were counted all
the same).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PROMPT = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")
EVAL = re.compile(r" eval time =\s+([\d.]+) ms /\s+(\d+) runs")


def main() -> None:
    text = Path(sys.argv[1]).read_text(errors="replace")
    prompts = [(float(ms), int(n)) for ms, n in PROMPT.findall(text)]
    prompt_s, fed = sum(ms for ms, _ in prompts) / 1000, sum(n for _, n in prompts)
    runs = [(float(ms), int(n)) for ms, n in EVAL.findall(text)]
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
        per_step = {}
        for r in rows:
            seconds, steps = per_step.get(r["extra"]["variant"], (0.0, 0))
            per_step[r["extra"]["variant"]] = (seconds + r["seconds"], steps + r["steps"])
        first = next(iter(per_step.values()), (0.0, 1))
        print("seconds a step, from the results: " + ", ".join(
            f"{name} {s / n:.2f} ({s / n / (first[0] / first[1]):.2f}x)"
            for name, (s, n) in per_step.items()))


if __name__ == "__main__":
    main()
