"""Side by side, for one scripted run: the exact tokens the in-process backend feeds the model,
and the ones the model behind `llama_cpp.server` sees (issue 37, item 1).

    python bench/token_diff.py --variant server            # the server path as shipped
    python bench/token_diff.py --variant server --full # every token, side by side

The same agent (a bench embedding task's tools, a scripted person) runs twice on the same
scripted replies:
- in-process: a recording model that declares what `LocalModel` declares; its messages are
  rendered as `LocalModel.complete` renders them (the GGUF's chat template, then its tokenizer);
- server: the real `OpenAIModel` (with the variant's keywords) against a stub that answers as
  llama-cpp-python's server does (its /v1/models, which server detection reads; it refuses
  `json_schema`, sends no usage in a stream); each
  request body it records is read by the server's own request model and rendered by the chat
  handler the server builds from the same GGUF (Jinja2ChatFormatter, then `llama.tokenize`).

Prints, for each request, the token counts, the common prefix and every differing stretch; then
the settings that are not tokens (schema and its enforcement, thought cap, stop, sampling); then
the prompt tokens each path must evaluate when its KV cache holds the previous request and the
reply, as predicted from the tokens (bench/prompt_cache.py measures the server's own figure).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent / "tests")]

from openai_stub import Chunks, OpenAIStub, completion, error, streamed  # noqa: E402
from server_variants import SERVER_VARIANTS, server_config, server_model  # noqa: E402
from tasks import TASKS, scripted_human  # noqa: E402

from jsonagent import Agent, AgentConfig, tool  # noqa: E402
from jsonagent.models import ModelReply, Usage  # noqa: E402
from jsonagent.tools.toolset import core_tools  # noqa: E402

REPLIES = {
    "embed-chained-orders": [
        {"thought": "First find the customer's id.", "tool_name": "customer_id",
         "args_list": {"name": "Brannock Vale"}},
        {"thought": "Now list the open orders of C-20931.", "tool_name": "open_orders",
         "args_list": {"customer": "C-20931"}},
        {"thought": "Add the two totals with code.", "tool_name": "CodeInterpreterTool",
         "args_list": {"code": "print(412.5 + 88.0)"}},
        {"thought": "The total is 500.5 euros.", "tool_name": "TaskCompleteTool",
         "args_list": {"output": "The open orders of Brannock Vale total 500.5 EUR."}},
    ],
}
"""A run's replies, written as llguidance lays them out in-process (`decoding.JSON_OPTIONS`)."""
SERVER_DROPS = {"n", "logit_bias_type", "user", "min_tokens"}
"""What llama_cpp.server's create_chat_completion leaves out of the body it hands on."""


class InProcess:
    """Scripted replies, with the capabilities `LocalModel` declares for this GGUF."""

    default_json_mode = "schema"
    stops_on_cancel = True
    streams = True
    keeps_max_length = True

    def __init__(self, replies: list[str], observation_role: str):
        self.name, self.replies, self.calls = "in-process", list(replies), []
        self.observation_role = observation_role
        self.context_tokens = 8192

    def complete(self, messages, response_format, *, stop=None, on_delta=None) -> ModelReply:
        self.calls.append({"messages": messages, "response_format": response_format, "stop": stop,
                           "streamed": on_delta is not None})
        return ModelReply(text=self.replies[len(self.calls) - 1], usage=Usage())


def llama_server_stub(replies: list[str]):
    """Answers as llama-cpp-python's server does; `real` lists the request bodies that got a
    scripted reply (not the refused ones, nor the one-token counting requests)."""
    from llama_cpp.server.types import CreateChatCompletionRequest

    real: list[dict] = []

    def answer(body):
        try:
            CreateChatCompletionRequest(**body)
        except Exception as exc:  # pydantic's 422, as the server sends it
            return error(422, " ".join(str(exc).split())[:300])
        if body.get("max_tokens") == 1:
            return (200, completion("{", prompt_tokens=1))
        real.append(body)
        text = replies[len(real) - 1]
        if body.get("stream"):
            return (200, Chunks(streamed([text])[:-1]))  # no usage chunk: it ignores include_usage
        return (200, completion(text))

    stub = OpenAIStub([answer] * 100)

    def models(handler) -> None:
        """/v1/models as the server lists its one model, so that server detection finds
        llama-cpp-python here as it does against the real one (`servers.py`)."""
        data = json.dumps({"object": "list", "data": [
            {"id": "local", "object": "model", "owned_by": "me", "permissions": []}]}).encode()
        handler.send_response(200 if handler.path.endswith("/v1/models") else 404)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    stub.server.RequestHandlerClass.do_GET = models
    return stub, real


def run(task_id: str, model, config: dict) -> None:
    task = next(t for t in TASKS if t.id == task_id)
    world = task.embed()
    own = [tool(fn, confirm=fn.__name__ in world.confirm) for fn in world.tools]
    agent = Agent(model=model, tools=[*core_tools(), *own], output_type=world.output,
                  approve=world.approve, ask_human=scripted_human(task), max_steps=8,
                  config=AgentConfig(**config))
    result = agent.run(task.question)
    if result.status != "completed":
        sys.exit(f"the scripted run ended {result.status}: {result.error}")


class Renderer:
    def __init__(self, gguf: str):
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.llm = llama_cpp.Llama(gguf, vocab_only=True, verbose=False)
        self.template = self.llm.metadata["tokenizer.chat_template"]
        model = self.llm._model
        eos, bos = self.llm.token_eos(), self.llm.token_bos()
        eos_text, bos_text = model.token_get_text(eos), model.token_get_text(bos)
        # as LocalModel builds it, and as Llama builds the server's handler from the metadata
        self.local = Jinja2ChatFormatter(template=self.template, eos_token=eos_text, bos_token=bos_text)
        self.server = Jinja2ChatFormatter(template=self.template, eos_token=eos_text,
                                          bos_token=bos_text, stop_token_ids=[eos])

    def tokens(self, formatted) -> list[int]:
        return self.llm.tokenize(formatted.prompt.encode("utf-8"),
                                 add_bos=not formatted.added_special, special=True)

    def in_process(self, messages) -> tuple[list[int], object]:
        formatted = self.local(messages=messages)
        return self.tokens(formatted), formatted

    def served(self, body: dict) -> tuple[list[int], object, dict]:
        from llama_cpp.server.types import CreateChatCompletionRequest

        kwargs = CreateChatCompletionRequest(**body).model_dump(exclude=SERVER_DROPS)
        formatted = self.server(messages=kwargs["messages"], functions=kwargs.get("functions"),
                                function_call=kwargs.get("function_call"),
                                tools=kwargs.get("tools"), tool_choice=kwargs.get("tool_choice"))
        return self.tokens(formatted), formatted, kwargs

    def text(self, tokens: list[int]) -> str:
        return self.llm.detokenize(tokens, special=True).decode("utf-8", errors="replace")


def show(a: list[int], b: list[int], r: Renderer, full: bool) -> None:
    width = 60
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal" and not full:
            print(f"    = {i2 - i1} tokens alike ({_clip(r.text(a[i1:i2]), 70)})")
            continue
        left, right = r.text(a[i1:i2]), r.text(b[j1:j2])
        mark = "=" if op == "equal" else "≠"
        print(f"    {mark} in-process [{i1}:{i2}] | server [{j1}:{j2}]")
        ls, rs = _lines(left, width), _lines(right, width)
        for x, y in zip(ls + [""] * (len(rs) - len(ls)), rs + [""] * (len(ls) - len(rs))):
            print(f"      {x:<{width}} | {y}")


def _lines(text: str, width: int) -> list[str]:
    shown = json.dumps(text, ensure_ascii=False)[1:-1]
    return [shown[i:i + width] for i in range(0, len(shown), width)] or [""]


def _clip(text: str, n: int) -> str:
    shown = json.dumps(text, ensure_ascii=False)[1:-1]
    return shown if len(shown) <= n else shown[: n // 2] + " … " + shown[-n // 2:]


def _common(a: list[int], b: list[int]) -> int:
    return len(os.path.commonprefix([a, b]))  # works on lists of tokens as on strings


def settings(local_call: dict, body: dict, kwargs: dict, formatted) -> None:
    from llama_cpp.server.types import CreateChatCompletionRequest

    from jsonagent.models.decoding import JSON_OPTIONS
    from jsonagent.models.local import LocalConfig

    defaults = {k: f.default for k, f in CreateChatCompletionRequest.model_fields.items()}
    sent = set(body) | set(body.get("extra_body") or {})
    cfg = LocalConfig()
    fmt = body.get("response_format") or {}
    schema = (fmt.get("schema") or {}) if fmt else {}
    local_schema = local_call["response_format"]["json_schema"]["schema"]
    thought = local_schema["anyOf"][0]["properties"]["thought"]
    rows = [
        ("response_format", local_call["response_format"]["type"] + " (llguidance)",
         f"{fmt.get('type')}{' + schema' if schema else ''} (GBNF from LlamaGrammar.from_json_schema)"),
        ("schema sent", "", "the same" if schema == local_schema else "DIFFERENT"),
        ("JSON layout", f"forced: {JSON_OPTIONS}", 'grammar allows " "? after { [ , : (model picks)'),
        ("thought cap", f"maxLength {thought.get('maxLength')} in the grammar",
         f"maxLength {schema.get('anyOf', [{}])[0].get('properties', {}).get('thought', {}).get('maxLength')}"
         f" in the grammar; {'streamed and watched by the loop' if body.get('stream') else 'whole reply'}"),
        ("stop", "end-of-generation tokens, or the grammar's end",
         f"{body.get('stop')} + the template's {formatted.stop!r} + EOS; the grammar's end"),
        ("max_tokens", f"{cfg.max_tokens}, steered to close in the last 32; runaway repeats stopped",
         f"{body.get('max_tokens')} (server default {defaults['max_tokens']}); cut there"),
    ]
    for key in ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty",
                "frequency_penalty", "seed"):
        ours = {"temperature": f"{cfg.temperature} (greedy argmax)", "top_k": "40 (above temp 0)",
                "seed": str(cfg.seed)}.get(key, "none")
        value = kwargs.get(key)
        rows.append((key, ours, f"{value}" + ("" if key in sent else " (server default)")))
    rows.append(("cache_prompt", "n/a (own KV cache)", str((body.get("extra_body") or body).get(
        "cache_prompt", "not sent")) + " (llama-cpp-python ignores it; it reuses its one slot)"))
    print("\n| setting | in-process | server |\n|---|---|---|")
    for name, a, b in rows:
        print(f"| {name} | {a} | {b} |")


def main() -> None:
    from jsonagent.models import catalog
    from jsonagent.models.local import TOOL_TURN

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--task", default="embed-chained-orders", choices=sorted(REPLIES))
    p.add_argument("--variant", default="server", choices=sorted(SERVER_VARIANTS))
    p.add_argument("--full", action="store_true", help="print the alike stretches too")
    args = p.parse_args()
    r = Renderer(str(catalog.path(args.model)))
    replies = [json.dumps(x, ensure_ascii=False) for x in REPLIES[args.task]]

    local = InProcess(replies, "tool" if TOOL_TURN.search(r.template) else "user")
    run(args.task, local, {})
    stub, real = llama_server_stub(replies)
    with stub:
        run(args.task, server_model(args.variant, stub.url), server_config(args.variant))
    bodies = [x["body"] for x in stub.requests]
    print(f"{args.task}, {len(local.calls)} requests; server variant {args.variant}; "
          f"{len(bodies)} HTTP requests to the server for {len(real)} replies "
          f"({sum(b.get('max_tokens') == 1 for b in bodies)} counting requests, "
          f"{sum('json_schema' in json.dumps(b.get('response_format')) for b in bodies)} refused "
          "json_schema)")
    kv_local, kv_server, evaluated = [], [], {"in-process": 0, "server": 0}
    for k, (call, body) in enumerate(zip(local.calls, real), start=1):
        a, _ = r.in_process(call["messages"])
        b, formatted, kwargs = r.served(body)
        same = _common(a, b)
        print(f"\nrequest {k}: in-process {len(a)} tokens, server {len(b)}; common prefix {same}"
              + ("; identical" if a == b else ""))
        if a != b or args.full:
            show(a, b, r, args.full)
        # what each must evaluate: all but the common prefix with what its cache holds
        evaluated["in-process"] += len(a) - _common(kv_local, a)
        evaluated["server"] += len(b) - _common(kv_server, b)
        reply = r.llm.tokenize(replies[k - 1].encode(), add_bos=False, special=False)
        kv_local = a + reply[:-1]  # the last token is sampled, never evaluated
        probe = any(x.get("max_tokens") == 1 for x in bodies)
        kv_server = b if probe else b + reply[:-1]  # a counting request leaves the prompt only
    settings(local.calls[-1], real[-1], kwargs, formatted)
    print(f"\nprompt tokens to evaluate over the run (predicted from the tokens, the first "
          f"request whole): in-process {evaluated['in-process']}, server {evaluated['server']}")


if __name__ == "__main__":
    main()
