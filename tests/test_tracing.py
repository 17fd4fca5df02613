"""OpenTelemetry: the CLI, the library and a real `jsonagent serve` export to a real OTLP/HTTP
receiver on 127.0.0.1 (otlp_receiver.py); every process that traces is a subprocess, so the
global tracer provider of this one stays unset. Hand-built events check what no front end
can produce yet (a sub-run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.proto")

from jsonagent.testing import step  # noqa: E402
from otlp_receiver import OtlpReceiver  # noqa: E402

TIME = step("GetTimeTools", {"timezone": "UTC"}, "what time is it")
DONE = step("TaskCompleteTool", {"output": "42"}, "done")
ASK = step("AskHumanHelpTool", {"question": "Which city?"}, "need a city")
CONTENT = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
           "gen_ai.tool.call.result")


@pytest.fixture
def otlp(monkeypatch):
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "500")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        yield receiver


def cli(*args: str, check_exit: int | None = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "jsonagent", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    if check_exit is not None:
        assert proc.returncode == check_exit, (proc.stderr + proc.stdout)[-3000:]
    return proc


def python(code: str, tmp_path, **env: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def script(tmp_path, replies, name="script.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(replies))
    return str(path)


def one_run(otlp: OtlpReceiver, runs: int = 1):
    spans = otlp.wait_for(lambda spans: sum(s.name.startswith("invoke_agent") for s in spans)
                          >= runs and not _open_children(spans))
    return spans


def latest(points):
    """Metrics are cumulative, and sent again at each flush: each series' last point."""
    last: dict = {}
    for attrs, point in points:
        key = tuple(sorted((k, str(v)) for k, v in attrs.items()))
        if key not in last or point.time_unix_nano >= last[key][1].time_unix_nano:
            last[key] = (attrs, point)
    return list(last.values())


def _open_children(spans) -> bool:
    """A child that names a parent not yet received: its batch is still on the way."""
    ids = {s.span_id for s in spans}
    return any(s.parent_id not in ids for s in spans
               if s.name.startswith(("chat ", "execute_tool ")))


def test_import_and_a_run_without_tracing_load_no_opentelemetry(tmp_path):
    out = python("""
        import sys, jsonagent
        from jsonagent.testing import ScriptedModel, step
        assert not [m for m in sys.modules if m.startswith(("opentelemetry", "jsonschema"))]
        agent = jsonagent.Agent(model=ScriptedModel([step("GetTimeTools", {"timezone": "UTC"}),
                                                     step("TaskCompleteTool", {"output": "1"})]))
        assert agent.run("time?").status == "completed"
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """, tmp_path)
    assert out.strip() == "[]"


def test_cli_run_spans_in_order_with_tokens_equal_to_the_result(tmp_path, otlp):
    path = script(tmp_path, [TIME, "not json at all", DONE])
    result = json.loads(cli("run", "--otel", "--no-store", "--output", "json",
                            "--model", f"scripted:{path}", "What time is it?").stdout)
    spans = one_run(otlp)
    [run] = otlp.named("invoke_agent")
    assert run.parent_id == ""
    children = otlp.children(run)
    chat = f"chat scripted:{path}"
    assert [s.name for s in children] == [chat, "execute_tool GetTimeTools", chat, chat,
                                          "execute_tool TaskCompleteTool"]
    assert [s.attributes.get("jsonagent.call") for s in children if s.name.startswith("chat")] \
        == ["step", "step", "reask"]
    a = run.attributes
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.conversation.id"] == result["session_id"]
    assert a["jsonagent.run.id"] == result["run_id"]
    assert a["jsonagent.run.status"] == "completed"
    assert a["gen_ai.usage.input_tokens"] == result["usage"]["prompt_tokens"] > 0
    assert a["gen_ai.usage.output_tokens"] == result["usage"]["completion_tokens"] > 0
    chats = [s for s in children if s.name.startswith("chat")]
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == \
        result["usage"]["prompt_tokens"]
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == f"scripted:{path}"
        assert chat.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    tool = children[1].attributes
    assert tool["gen_ai.operation.name"] == "execute_tool"
    assert tool["gen_ai.tool.name"] == "GetTimeTools"
    assert tool["gen_ai.tool.call.id"] == f"{result['run_id']}.1"
    assert "error.type" not in tool
    assert all(s.start <= s.end for s in spans)
    assert children == sorted(children, key=lambda s: s.start)
    for span in spans:  # no content without the opt-in
        assert not set(CONTENT) & set(span.attributes), span
    # the metrics of the conventions, for model calls and tool calls
    tokens = latest(otlp.metrics["gen_ai.client.token.usage"])
    assert sum(p.sum for attrs, p in tokens if attrs["gen_ai.token.type"] == "input") == \
        result["usage"]["prompt_tokens"]
    ops = {attrs["gen_ai.operation.name"] for attrs, _ in
           otlp.metrics["gen_ai.client.operation.duration"]}
    assert ops == {"chat", "execute_tool"}


LIBRARY = """
    import json, os
    from jsonagent import Agent, core_tools, tool
    from jsonagent.testing import ScriptedModel, step

    @tool
    def boom(n: int) -> int:
        '''Fail.'''
        raise ValueError("no such n")

    tools = [*core_tools(), boom, *json.loads(os.environ["EXTRA_TOOLS"])]
    replies = [step("boom", {"n": 1}), step("fetch", {"q": "x"}),
               step("TaskCompleteTool", {"output": "done"})]
    agent = Agent(model=ScriptedModel(replies), tools=tools)
    print(agent.run("Break it").model_dump_json())
"""


def http_tool(url: str) -> dict:
    return {"name": "fetch", "description": "Fetch.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "handler": {"http": {"method": "GET", "url": url + "/api", "query": {"q": "{q}"}}}}


@pytest.mark.parametrize("capture", [False, True])
def test_library_errors_content_opt_in_and_http_tool_traceparent(tmp_path, otlp, capture):
    from http_fakes import FakeAPI

    with FakeAPI({"/api": lambda req: (200, {"ok": True})}) as api:
        env = {"EXTRA_TOOLS": json.dumps([http_tool(api.url)])}
        if capture:
            env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
        result = json.loads(python(LIBRARY, tmp_path, **env))
        [request] = api.requests
    assert result["status"] == "completed"
    one_run(otlp)
    [run] = otlp.named("invoke_agent")
    tools = [s for s in otlp.children(run) if s.name.startswith("execute_tool")]
    boom, fetch = tools[0], tools[1]
    assert boom.attributes["error.type"] == "ValueError" and boom.status == 2  # ERROR
    assert "error.type" not in fetch.attributes
    # the API the HTTP tool called is in the trace, as the tool call's child
    version, trace_id, parent_id, flags = request.headers["traceparent"].split("-")
    assert (trace_id, parent_id) == (fetch.trace_id, fetch.span_id)
    everything = {k for s in otlp.spans for k in s.attributes}
    if not capture:
        assert not set(CONTENT) & everything
        return
    assert set(CONTENT) <= everything
    assert json.loads(run.attributes["gen_ai.input.messages"])[0]["parts"][0]["content"] \
        == "Break it"
    assert json.loads(fetch.attributes["gen_ai.tool.call.arguments"]) == {"q": "x"}
    assert json.loads(fetch.attributes["gen_ai.tool.call.result"]) == {"ok": True}
    chat = next(s for s in otlp.children(run) if s.name.startswith("chat"))
    assert "boom" in json.loads(chat.attributes["gen_ai.output.messages"])[0]["parts"][0]["content"]


def test_a_resumed_run_links_to_the_paused_one_from_another_process(tmp_path, otlp):
    path = script(tmp_path, [ASK, DONE])
    paused = json.loads(cli("run", "--otel", "--no-input", "--output", "json", "--model",
                            f"scripted:{path}", "Weather?", check_exit=4).stdout)
    one_run(otlp)
    done = json.loads(cli("resume", paused["run_id"], "--otel", "--answer", "Oslo",
                          "--output", "json", "--model", f"scripted:{path}").stdout)
    assert done["status"] == "completed"
    one_run(otlp, runs=2)
    first, second = sorted(otlp.named("invoke_agent"), key=lambda s: s.start)
    assert first.attributes["jsonagent.run.status"] == "needs_human"
    assert second.attributes["jsonagent.resumed"] is True
    assert second.attributes["jsonagent.run.status"] == "completed"
    assert second.links == [(first.trace_id, first.span_id)]
    # the answered question is the resumed span's tool call
    assert [s.name.split(":")[0] for s in otlp.children(second)] == [
        "execute_tool AskHumanHelpTool", "chat scripted", "execute_tool TaskCompleteTool"]


def test_batch_tasks_share_the_batch_trace(tmp_path, otlp):
    path = script(tmp_path, [DONE])
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "input": "one"}\n{"id": "b", "input": "two"}\n')
    cli("batch", str(tasks), "--out", str(tmp_path / "out.jsonl"), "--workers", "2", "--otel",
        "--model", f"scripted:{path}")
    otlp.wait_for(lambda spans: len([s for s in spans if s.name.startswith("invoke_agent")]) == 2
                  and any(s.name == "batch" for s in spans))
    [batch] = otlp.named("batch")
    runs = otlp.named("invoke_agent")
    assert {(r.trace_id, r.parent_id) for r in runs} == {(batch.trace_id, batch.span_id)}


def test_traceparent_on_the_rest_api_and_a2a_parents_the_run(tmp_path, otlp):
    pytest.importorskip("a2a")
    import asyncio

    from test_server import Server
    from test_server_a2a import client_for, send

    caller = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    server = Server(tmp_path, [DONE], "--otel", token="t0k").start()
    try:
        with server.client as c:
            r = c.post("/v1/runs", json={"input": "hi"}, headers={"traceparent": caller})
        assert r.status_code == 201, r.text
        server.wait(r.json()["id"], "completed")
        [run] = one_run(otlp) and otlp.named("invoke_agent")
        assert (run.trace_id, run.parent_id) == ("ab" * 16, "cd" * 8)

        a2a_caller = "00-" + "12" * 16 + "-" + "34" * 8 + "-01"

        async def flow():
            client, http = await client_for(server, streaming=False)
            http.headers["traceparent"] = a2a_caller
            try:
                await send(client, "hello over a2a")
            finally:
                await http.aclose()

        asyncio.run(asyncio.wait_for(flow(), 60))
        one_run(otlp, runs=2)
        assert ("12" * 16, "34" * 8) in {(s.trace_id, s.parent_id)
                                         for s in otlp.named("invoke_agent")}
    finally:
        server.kill()


def test_a_sub_run_nests_under_its_parents_tool_call():
    """Hand-built events: a sub-run's RunStart names its parent (issue 26 adds the field);
    its span is the child of the parent's execute_tool span in flight."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from jsonagent import events as ev
    from jsonagent.spans import SpanBuilder
    from jsonagent.usage import Usage

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    outgoing: list = []
    spans = SpanBuilder(model="m", tracer_provider=provider, meter_provider=MeterProvider(),
                        outgoing=outgoing.append)

    def start(run_id):
        return ev.RunStart(question="q", model="m", json_mode="object", config={},
                           toolset="", tools=[], run_id=run_id, session_id="s", t=1.0)

    class SubStart:  # what issue 26's RunStart carries, for a builder that reads it by name
        type = "run_start"

        def __init__(self, run_id, parent):
            self.run_id, self.session_id, self.t = run_id, "s", 2.0
            self.model, self.question = "m", "sub"
            self.parent_run_id, self.depth = parent, 1

    end = dict(status="completed", usage=Usage(prompt_tokens=3, completion_tokens=1), stats={})
    spans.write(start("run_a"))
    spans.write(ev.StepTaken(step=1, thought="", tool="ask_agent", args={}, repairs=[],
                             run_id="run_a", session_id="s", t=1.5))
    spans.write(SubStart("run_b", "run_a"))
    spans.write(ev.RunEnd(run_id="run_b", session_id="s", t=3.0, **end))
    in_flight = outgoing[-1]  # the sub-run is over: an HTTP call goes under the parent's tool
    spans.write(ev.ToolResult(step=1, tool="ask_agent", observation="ok", error=False,
                              duration_s=2.0, run_id="run_a", session_id="s", t=3.5))
    spans.write(ev.RunEnd(run_id="run_a", session_id="s", t=4.0, **end))
    [tool] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool ask_agent"]
    assert in_flight.get_span_context().span_id == tool.context.span_id
    sub = [s for s in exporter.get_finished_spans()
           if s.attributes.get("jsonagent.run.id") == "run_b"][0]
    assert sub.parent.span_id == tool.context.span_id
    assert tool.parent.span_id != sub.context.span_id
    assert sub.attributes["jsonagent.run.parent_id"] == "run_a"
    assert sub.attributes["jsonagent.run.depth"] == 1
    top = [s for s in exporter.get_finished_spans()
           if s.attributes.get("jsonagent.run.id") == "run_a"][0]
    assert top.parent is None and tool.parent.span_id == top.context.span_id


def test_transcripts_written_before_finish_reason_still_load():
    from jsonagent.events import ModelCall, reader

    line = ('{"v": 1, "run_id": "r", "session_id": "s", "seq": 2, "t": 1.0, "type": '
            '"model_reply", "step": 1, "attempt": 0, "raw": "{}", "usage": {}, '
            '"latency_s": 0.1, "json_mode": "object"}')
    event = reader().validate_json(line)
    assert isinstance(event, ModelCall) and event.finish_reason is None


SUB_AGENTS = """
import json
from jsonagent import Agent
from jsonagent.testing import ScriptedModel, step

coder = Agent(model=ScriptedModel([step("GetTimeTools", {"timezone": "UTC"}, "look"),
                                   step("TaskCompleteTool", {"output": "7"}, "done")]))
writer = Agent(model=ScriptedModel([step("coder", {"task": "3 + 4?"}, "delegate"),
                                    step("TaskCompleteTool", {"output": "seven"}, "done")]),
               tools=[coder.as_tool(name="coder", description="Does arithmetic.")])
result = writer.run("How much is 3 + 4?")
print(json.dumps({"status": result.status, "run_id": result.run_id}))
"""


def test_a_real_sub_agent_is_traced_once_under_its_parents_tool_call(tmp_path, otlp):
    """Agents as tools, end to end: the sub-run's own session traces it, once, as a child of
    the parent's execute_tool span (its events also reach the parent's records)."""
    result = json.loads(python(SUB_AGENTS, tmp_path))
    assert result["status"] == "completed"
    one_run(otlp, runs=2)
    runs = otlp.named("invoke_agent")
    assert len(runs) == 2, [s.name for s in otlp.spans]  # no run traced twice
    top = next(s for s in runs if s.attributes["jsonagent.run.id"] == result["run_id"])
    sub = next(s for s in runs if s is not top)
    call = next(s for s in otlp.children(top) if s.name == "execute_tool coder")
    assert (sub.trace_id, sub.parent_id) == (call.trace_id, call.span_id)
    assert [s.name for s in otlp.children(sub)] == [
        "chat scripted", "execute_tool GetTimeTools", "chat scripted",
        "execute_tool TaskCompleteTool"]
