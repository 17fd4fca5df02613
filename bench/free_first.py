"""What llama-cpp-python's server grammar costs a step, and what a reply written without it
would be (issue 37: the server's seconds per step against in-process's).

    python bench/free_first.py [--model qwen2.5-coder-1.5b] [--tasks 12]

For the first step of each bench task (the system prompt the loop sends, the task's question),
the same request goes to one `llama_cpp.server` twice, at temperature 0: with the step's schema
as the server's grammar (what schema mode sends it), and without. It prints, per request and in
total, the seconds and completion tokens of each, whether the reply written without the grammar
is valid under the schema, and whether it is the very reply the grammar gave.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent / "tests" / "e2e")]


def main() -> None:
    from jsonschema import Draft202012Validator
    from llama_server import LlamaServer
    from openai import OpenAI
    from tasks import TASKS

    from jsonagent.envelope import response_format
    from jsonagent.models import catalog
    from jsonagent.prompt import system_prompt
    from jsonagent.tools.toolset import Toolset

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--tasks", type=int, default=12, help="the first N tasks without tools of "
                                                          "their own")
    args = p.parse_args()
    toolset = Toolset.build(None)
    fmt = response_format("schema", toolset, 600)
    schema = fmt["json_schema"]["schema"]
    valid = Draft202012Validator(schema)
    system = system_prompt(toolset)
    tasks = [t for t in TASKS if t.embed is None][:args.tasks]
    rows = []
    with LlamaServer(catalog.path(args.model)) as server:
        client = OpenAI(base_url=server.base_url, api_key="sk-local")

        def ask(question: str, grammar: bool) -> tuple[float, int, str]:
            t = time.perf_counter()
            extra = {"repeat_penalty": 1.0}
            if grammar:  # llama-cpp-python's dialect of a schema
                extra["response_format"] = {"type": "json_object", "schema": schema}
            reply = client.chat.completions.create(
                model="local", temperature=0, max_tokens=512, extra_body=extra,
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": question}])
            return (time.perf_counter() - t, reply.usage.completion_tokens,
                    reply.choices[0].message.content or "")

        ask("warm-up", False)  # the system prompt is in the server's cache for both
        print(f"{'task':28} {'grammar s':>9} {'tok':>4} {'free s':>7} {'tok':>4}  "
              f"valid  same", flush=True)
        for task in tasks:
            g_s, g_tok, g_text = ask(task.question, True)
            f_s, f_tok, f_text = ask(task.question, False)
            try:
                ok = not list(valid.iter_errors(json.loads(f_text)))
            except ValueError:
                ok = False
            same = json.loads(g_text) == json.loads(f_text) if ok else False
            rows.append((g_s, g_tok, f_s, f_tok, ok, same))
            print(f"{task.id:28} {g_s:9.2f} {g_tok:4} {f_s:7.2f} {f_tok:4}  {str(ok):5}  "
                  f"{same}", flush=True)
    g = sum(r[0] for r in rows), sum(r[1] for r in rows)
    f = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"\n{len(rows)} requests: with the grammar {g[0]:.1f} s for {g[1]} tokens "
          f"({1000 * g[0] / g[1]:.0f} ms a token); without {f[0]:.1f} s for {f[1]} tokens "
          f"({1000 * f[0] / f[1]:.0f} ms a token)")
    print(f"without the grammar: {sum(r[4] for r in rows)} valid under the schema, "
          f"{sum(r[5] for r in rows)} the same reply as with it; median seconds "
          f"{statistics.median(r[0] for r in rows):.2f} with, "
          f"{statistics.median(r[2] for r in rows):.2f} without")


if __name__ == "__main__":
    main()
