"""Local model speed on this machine, in one run: load, first step cold and with the disk cache,
time from a step's start to its first thought character, decoding speed free / under llama.cpp's
grammar / under llguidance, streamed or not, seconds per step.

    flock /tmp/jsonagent-bench.lock python bench/local_speed.py [--model qwen2.5-coder-1.5b] [--steps 3]

Steps are streamed as a terminal streams them (`on_delta`, read by the partial reader), so the
first thought character is timed where the display would print it.

Each "fresh process" figure comes from a child process of its own, so nothing is warm but the
OS file cache. Steps are model calls on the default system prompt with a fixed history (the
observations are scripted), in schema mode with the loop's thought cap.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUESTION = "What time is it in Tokyo right now? Then tell me the weekday."
OBSERVATION = '{"tool_name": "GetTimeTools", "response": {"time": "2026-11-23T14:05:00+09:00", "weekday": "Monday"}}'
SPEED_QUESTION = "Write a short paragraph about the history of the Python language, then finish."


def _setup():
    from jsonagent.envelope import response_format
    from jsonagent.prompt import system_prompt
    from jsonagent.tools.toolset import Toolset

    toolset = Toolset.build(None)
    return system_prompt(toolset), response_format("schema", toolset, 600)


class Watcher:
    """What the loop does with each piece of a streamed reply: the partial reader; notes when
    the first thought character became known, seconds after `t0`."""

    def __init__(self, t0: float):
        from jsonagent.partial import reader_for

        self.t0, self.at, self.reader = t0, None, reader_for()

    def __call__(self, piece: str) -> None:
        for kind, _ in self.reader.feed(piece):
            if kind == "thought" and self.at is None:
                self.at = time.perf_counter() - self.t0


def child_steps(model: str, kv_cache: bool, steps: int, max_tokens: int) -> dict:
    """One fresh process: load the model, then `steps` model calls of a growing run."""
    t0 = time.perf_counter()
    from jsonagent.models.local import LocalConfig, LocalModel

    llm = LocalModel(model, LocalConfig(kv_cache=kv_cache, max_tokens=max_tokens))
    load = time.perf_counter() - t0
    system, fmt = _setup()
    messages = [{"role": "system", "content": system}, {"role": "user", "content": QUESTION}]
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        first = Watcher(t)
        reply = llm.complete(messages, fmt, on_delta=first)
        out.append({"s": time.perf_counter() - t, "completion": reply.usage.completion_tokens,
                    "prompt": reply.usage.prompt_tokens, "cached": reply.usage.cached_tokens,
                    "first_thought": first.at})
        messages += [{"role": "assistant", "content": reply.text},
                     {"role": llm.observation_role, "content": OBSERVATION}]  # as the loop sends it
    llm.close()
    return {"load": load, "steps": out}


def child_speed(model: str, max_tokens: int, reps: int = 2) -> dict:
    """Tokens/s of each decoder on the same prompt; the prompt is evaluated before timing."""
    from jsonagent.envelope import response_format
    from jsonagent.models import decoding
    from jsonagent.models.local import LocalConfig, LocalModel
    from jsonagent.tools.toolset import Toolset

    # these replies run to the cap on purpose; the steering that closes a runaway reply in its
    # last tokens would time the mask on every token there, not the steady state
    decoding.CLOSING_RESERVE = 0
    system, _ = _setup()
    fmt = response_format("schema", Toolset.build(None))  # no thought cap: long enough to time
    messages = [{"role": "system", "content": system}, {"role": "user", "content": SPEED_QUESTION}]
    llm = LocalModel(model, LocalConfig(kv_cache=False, max_tokens=max_tokens))
    llm.complete(messages, None)  # evaluates the prompt; later calls reuse it all but one token
    out = {}
    for label, decoder, response_format_, streamed in (
            ("free decoding", "llguidance", None, False),
            ("llama.cpp grammar (before)", "grammar", fmt, False),
            ("llguidance (now)", "llguidance", fmt, False),
            ("llguidance, streamed", "llguidance", fmt, True)):
        llm.config.decoder = decoder
        if decoder == "grammar":
            saved, llm._guide = llm._guide, None
        rates = []
        for _ in range(reps):
            t = time.perf_counter()
            reply = llm.complete(messages, response_format_,
                                 on_delta=Watcher(t) if streamed else None)
            rates.append((reply.usage.completion_tokens / (time.perf_counter() - t), reply.usage.completion_tokens))
        if decoder == "grammar":
            llm._guide = saved
        out[label] = rates
    llm.close()
    return out


def run_child(args: list[str], home: Path) -> dict:
    env = {**os.environ, "JSONAGENT_HOME": str(home)}
    done = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"child {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_avg() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="catalog name or .gguf path")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128, help="reply cap when timing decoders")
    parser.add_argument("--step-tokens", type=int, default=1024, help="reply cap of a step")
    parser.add_argument("--child", choices=["steps", "speed"])
    parser.add_argument("--kv-cache", action="store_true")
    parser.add_argument("--reps", type=int, default=2, help="replies timed per decoder")
    args = parser.parse_args()
    if args.child == "steps":
        print(json.dumps(child_steps(args.model, args.kv_cache, args.steps, args.step_tokens)))
        return
    if args.child == "speed":
        print(json.dumps(child_speed(args.model, args.max_tokens, args.reps)))
        return

    from jsonagent.models import catalog

    model = str(catalog.path(args.model)) if args.model in catalog.CATALOG else args.model
    print(f"model {Path(model).name}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="jsonagent-speed-") as tmp:
        home = Path(tmp)
        common = ["--model", model, "--steps", str(args.steps), "--step-tokens", str(args.step_tokens)]
        print(f"  [{load_avg()}]")
        cold = run_child(["--child", "steps", *common], home)
        print(f"  [{load_avg()}]")
        saving = run_child(["--child", "steps", "--kv-cache", *common], home)  # evaluates and saves
        print(f"  [{load_avg()}]")
        cached = run_child(["--child", "steps", "--kv-cache", *common], home)  # loads
        print(f"  [{load_avg()}]")
        speed = run_child(["--child", "speed", "--model", model, "--max-tokens", str(args.max_tokens),
                           "--reps", str(args.reps)], home)
        print(f"  [{load_avg()}]")

    def row(label: str, value: str) -> None:
        print(f"{label:<52} {value}")

    row("model load (fresh process, median of 3)",
        f"{statistics.median([r['load'] for r in (cold, saving, cached)]):.2f} s")
    for label, r in (("first step, no disk cache (--no-kv-cache)", cold),
                     ("first step, disk cache being written", saving),
                     ("first step, disk cache loaded", cached)):
        first = r["steps"][0]
        warm = statistics.median(s["s"] for s in r["steps"][1:]) if len(r["steps"]) > 1 else float("nan")
        row(label, f"{first['s']:.2f} s  ({first['prompt']} prompt tokens, {first['cached']} not evaluated, "
                   f"{first['completion']} generated); warm step {warm:.2f} s; ratio {first['s'] / warm:.2f}x")
    for label, r in (("first thought character, first step, no disk cache", cold),
                     ("first thought character, first step, disk cache loaded", cached)):
        later = [s["first_thought"] for s in r["steps"][1:] if s["first_thought"] is not None]
        first = r["steps"][0]["first_thought"]
        row(label, (f"{first:.2f} s" if first is not None else "no thought")
            + (f"; warm step {statistics.median(later):.2f} s" if later else ""))
    steps = [s for r in (cold, saving, cached) for s in r["steps"][1:]]
    if steps:
        row("seconds per warm step (median)", f"{statistics.median(s['s'] for s in steps):.2f} s "
                                              f"(n={len(steps)})")
    free = max(rate for rate, _ in speed["free decoding"])
    for label, rates in speed.items():
        best = max(rate for rate, _ in rates)
        shown = ", ".join(f"{rate:.1f} ({n} tok)" for rate, n in rates)
        row(f"tokens/s, {label}", f"{shown}; best {best:.1f} = {100 * best / free:.0f}% of free")
    on = max(rate for rate, _ in speed["llguidance, streamed"])
    off = max(rate for rate, _ in speed["llguidance (now)"])
    row("streaming on / off (llguidance, best)", f"{on:.1f} / {off:.1f} tokens/s = {100 * on / off:.0f}%")


if __name__ == "__main__":
    main()
