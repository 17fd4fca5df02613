"""Seconds per step against reused prefix tokens, from the benchmark's transcripts.

    python bench/step_table.py bench/results/MODEL/transcripts/local-schema-*.jsonl

One row per model call (the `model_reply` events), then medians for calls that reused
nothing and for calls that reused part of their prompt from llama.cpp's KV cache.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jsonagent import read_journal  # noqa: E402


def main(paths: list[str]) -> None:
    rows = []
    for path in paths:
        for event in read_journal(path):
            if event.type == "model_reply" and event.usage is not None:
                rows.append((Path(path).stem, event.step, event.usage, event.latency_s))
    if not rows:
        sys.exit("no model calls with usage in those transcripts")
    print("| transcript | step | prompt tokens | reused | completion tokens | seconds |")
    print("|---|---|---|---|---|---|")
    for name, step, usage, seconds in rows:
        print(f"| {name} | {step} | {usage.prompt_tokens} | {usage.cached_tokens} "
              f"| {usage.completion_tokens} | {seconds:.1f} |")
    prompt = sum(u.prompt_tokens for _, _, u, _ in rows)
    reused = sum(u.cached_tokens for _, _, u, _ in rows)
    print(f"\n{len(rows)} calls; {reused} of {prompt} prompt tokens reused ({reused / prompt:.0%})")
    for label, chosen in (("nothing reused", [r for r in rows if not r[2].cached_tokens]),
                          ("prefix reused", [r for r in rows if r[2].cached_tokens])):
        if chosen:
            seconds = [r[3] for r in chosen]
            per_token = [r[3] / max(r[2].completion_tokens, 1) for r in chosen]
            print(f"{label:15} n={len(chosen):3}  median {statistics.median(seconds):6.1f} s/call"
                  f"  median {statistics.median(per_token):5.2f} s per completion token")


if __name__ == "__main__":
    main(sys.argv[1:])
