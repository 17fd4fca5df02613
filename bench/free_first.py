"""What llama-cpp-python's server grammar costs a step, and what a reply written without it,
or under a grammar that holds only its first characters, would be (issue 37: the server's
seconds per step against in-process's).

    python bench/free_first.py [--model qwen2.5-coder-1.5b] [--tasks 12]

For the first step of each bench task (the system prompt the loop sends, the task's question),
the same request goes to one `llama_cpp.server` in each arm, at temperature 0:
- grammar: the step's schema as the server's grammar (what schema mode sends it);
- free: no grammar;
- prefix: a GBNF grammar that holds only the reply's opening, `{"thought": "`, and lets
  anything follow (the reply cannot open with a fence or indentation, so it can be kept in
  the history as written).
It prints, per request and in total, the seconds and completion tokens of each arm, whether
each reply is valid under the schema, and whether it is the very reply the grammar gave.
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

        def ask(question: str, arm: str) -> tuple[float, int, str]:
            t = time.perf_counter()
            extra = {"repeat_penalty": 1.0}
            if arm == "grammar":  # llama-cpp-python's dialect of a schema
                extra["response_format"] = {"type": "json_object", "schema": schema}
            elif arm == "prefix":
                extra["grammar"] = PREFIX
            reply = client.chat.completions.create(
                model="local", temperature=0, max_tokens=512, extra_body=extra,
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": question}])
            return (time.perf_counter() - t, reply.usage.completion_tokens,
                    reply.choices[0].message.content or "")

        def judged(text: str, reference: str | None) -> tuple[bool, bool]:
            try:
                ok = not list(valid.iter_errors(json.loads(text)))
            except ValueError:
                return False, False
            return ok, reference is not None and ok and json.loads(text) == json.loads(reference)

        ask("warm-up", "free")  # the system prompt is in the server's cache for every arm
        print(f"{'task':28} " + "  ".join(f"{a + ' s':>9} {'tok':>4} ok same" for a in ARMS),
              flush=True)
        for task in tasks:
            got = {arm: ask(task.question, arm) for arm in ARMS}
            row = {arm: (*got[arm][:2], *judged(got[arm][2], got["grammar"][2])) for arm in ARMS}
            rows.append(row)
            print(f"{task.id:28} " + "  ".join(
                f"{s_:9.2f} {tok:4} {str(ok)[0]:>2} {str(same)[0]:>4}"
                for s_, tok, ok, same in row.values()), flush=True)
            print("    prefix reply: " + json.dumps(got["prefix"][2])[:160], flush=True)
    print()
    for arm in ARMS:
        secs, toks = sum(r[arm][0] for r in rows), sum(r[arm][1] for r in rows)
        print(f"{arm:8} {len(rows)} requests, {secs:.1f} s for {toks} tokens "
              f"({1000 * secs / toks:.0f} ms a token), median {statistics.median(r[arm][0] for r in rows):.2f} s; "
              f"{sum(r[arm][2] for r in rows)} valid under the schema, "
              f"{sum(r[arm][3] for r in rows)} the grammar's very reply")


ARMS = ("grammar", "free", "prefix")
PREFIX = 'root ::= "{\\"thought\\": \\"" [^\\x00]*'
"""GBNF: the reply's opening as in-process's grammar writes it, then anything."""



if __name__ == "__main__":
    main()
