"""A four-city task with parallel calls off and on (issue 42): a scripted model, and a weather
tool that takes 1 s a call. Off, the model asks for one city a step; on, for all four in one
step, which run side by side.

    python bench/parallel.py [--runs 3]
    python bench/parallel.py --model qwen2.5-coder-1.5b    # the task on a real model

With --model, the task runs on that model with the option off and on, and prints each step's
calls: a model as `--model` takes it (local:PATH.gguf, NAME@URL), or a name of the local
catalog (`jsonagent models`), which runs in process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

CITIES = ("Oslo", "Rome", "Lima", "Pune")


def task(parallel: bool) -> float:
    from jsonagent import Agent, AgentConfig, tool
    from jsonagent.testing import ScriptedModel, step

    @tool
    def weather(city: str) -> str:
        """The weather in a city (it takes a second)."""
        time.sleep(1.0)
        return f"sunny in {city}"

    done = step("TaskCompleteTool", {"output": "sunny everywhere"}, "all four are in")
    if parallel:
        replies = [{"thought": "the four cities at once", "calls": [
            {"tool_name": "weather", "args_list": {"city": c}} for c in CITIES]}, done]
    else:
        replies = [step("weather", {"city": c}, f"next, {c}") for c in CITIES] + [done]
    agent = Agent(model=ScriptedModel(replies), tools=[weather],
                  config=AgentConfig(parallel_calls=4 if parallel else 1))
    t0 = time.perf_counter()
    result = agent.run("What is the weather in Oslo, Rome, Lima and Pune?")
    took = time.perf_counter() - t0
    assert result.status == "completed", result.error
    return took


def on_model(model: str) -> None:
    from jsonagent import Agent, AgentConfig, tool
    from jsonagent.models import catalog

    if model in catalog.CATALOG:
        model = f"local:{catalog.path(model)}"

    @tool
    def weather(city: str) -> str:
        """The weather in a city (it takes a second)."""
        time.sleep(1.0)
        return f"sunny, 21 °C in {city}"

    for n in (1, 4):
        agent = Agent(model=model, tools=[weather],
                      config=AgentConfig(parallel_calls=n))
        t0 = time.perf_counter()
        result = agent.run("What is the weather in Oslo, Rome, Lima and Pune?")
        print(f"parallel_calls={n}: {result.status} in {time.perf_counter() - t0:.1f} s, "
              f"{len(result.steps)} steps: {result.answer!r}")
        for s in result.steps:
            print(f"  step {s.index}: " + "; ".join(
                f"{c.tool} {json.dumps(c.args, ensure_ascii=False)}" for c in s.calls))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model", help="run the task on this model instead")
    options = parser.parse_args()
    if options.model:
        return on_model(options.model)
    runs = options.runs
    print(f"four-city task, weather calls of 1 s each, scripted model, {runs} runs, median")
    for name, parallel in (("parallel_calls=1 (off)", False), ("parallel_calls=4 (on) ", True)):
        times = [task(parallel) for _ in range(runs)]
        print(f"  {name}  {statistics.median(times):6.2f} s   "
              f"(min {min(times):.2f}, max {max(times):.2f})")


if __name__ == "__main__":
    main()
