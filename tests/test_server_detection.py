"""Which OpenAI-compatible server is behind an endpoint (models/servers.py), from recorded
/v1/models, /props and friends served on 127.0.0.1, and the settings each one gets."""

import asyncio
import json

import pytest

from jsonagent import Agent, AgentConfig
from jsonagent.models.openai import OpenAIModel
from jsonagent.models.servers import detect
from jsonagent.testing import step

from http_fakes import FakeAPI
from openai_stub import completion, streamed

DONE = json.dumps(step("TaskCompleteTool", {"output": "4"}, "done"))

# What each server answered (trimmed to the fields detection reads, and a few beside them)
LLAMA_CPP = {
    "/v1/models": {"object": "list", "data": [{
        "id": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "object": "model", "created": 1735689600,
        "owned_by": "llamacpp", "meta": {"vocab_type": 2, "n_vocab": 151936, "n_ctx_train": 32768,
                                         "n_embd": 1536, "n_params": 1543714304}}],
        "models": [{"name": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "type": "model"}]},
    "/props": {"default_generation_settings": {"n_ctx": 8192, "params": {"temperature": 0.8}},
               "total_slots": 1, "model_path": "/models/qwen.gguf", "build_info": "b5091-6a11a9c7",
               "chat_template": "{% for message in messages %}...", "modalities": {"vision": False}},
}
LLAMA_CPP_PYTHON = {
    "/v1/models": {"object": "list", "data": [{"id": "/models/qwen.gguf", "object": "model",
                                               "owned_by": "me", "permissions": []}]},
}
OLLAMA = {
    "/v1/models": {"object": "list", "data": [{"id": "qwen2.5-coder:1.5b", "object": "model",
                                               "created": 1733500000, "owned_by": "library"}]},
    "/api/version": {"version": "0.5.7"},
}
OLLAMA_NAMESPACED = {
    "/v1/models": {"object": "list", "data": [{"id": "bartowski/qwen2.5-coder:q4", "object": "model",
                                               "created": 1733500000, "owned_by": "bartowski"}]},
    "/api/version": {"version": "0.6.2"},
}
VLLM = {
    "/v1/models": {"object": "list", "data": [{
        "id": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "object": "model", "created": 1735689600,
        "owned_by": "vllm", "root": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "parent": None,
        "max_model_len": 32768, "permission": [{"id": "modelperm-1", "object": "model_permission"}]}]},
}
LM_STUDIO = {
    "/v1/models": {"data": [{"id": "qwen2.5-coder-1.5b-instruct", "object": "model",
                             "owned_by": "organization_owner"},
                            {"id": "text-embedding-nomic-embed-text-v1.5", "object": "model",
                             "owned_by": "organization_owner"}], "object": "list"},
    "/api/v0/models": {"object": "list", "data": [
        {"id": "qwen2.5-coder-1.5b-instruct", "object": "model", "type": "llm",
         "publisher": "lmstudio-community", "arch": "qwen2", "compatibility_type": "gguf",
         "quantization": "Q4_K_M", "state": "loaded", "max_context_length": 32768,
         "loaded_context_length": 4096}]},
}
SOMEONE_ELSE = {
    "/v1/models": {"object": "list", "data": [{"id": "deepseek-chat", "object": "model",
                                               "owned_by": "deepseek"}]},
}


def serve(recorded: dict, chat=None) -> FakeAPI:
    routes = {path: (lambda req, body=body: (200, body)) for path, body in recorded.items()}
    if chat is not None:
        routes["/v1/chat/completions"] = chat
    return FakeAPI(routes)


@pytest.mark.parametrize("recorded,kind,version,context", [
    (LLAMA_CPP, "llama.cpp", "b5091-6a11a9c7", 8192),
    (LLAMA_CPP_PYTHON, "llama-cpp-python", None, None),
    (OLLAMA, "ollama", "0.5.7", None),
    (OLLAMA_NAMESPACED, "ollama", "0.6.2", None),
    (VLLM, "vllm", None, 32768),
    (LM_STUDIO, "lmstudio", None, 4096),
    (SOMEONE_ELSE, "unknown", None, None),
    ({"/props": LLAMA_CPP["/props"]}, "llama.cpp", "b5091-6a11a9c7", 8192),  # before owned_by
    ({}, "unknown", None, None),  # 404 everywhere
], ids=["llama.cpp", "llama-cpp-python", "ollama", "ollama-namespaced", "vllm", "lmstudio",
        "unknown", "llama.cpp-old", "nothing"])
def test_each_server_is_told_by_its_own_answers(recorded, kind, version, context):
    with serve(recorded) as api:
        found = asyncio.run(detect(api.url + "/v1", "sk-test"))
    assert (found.kind, found.version, found.context_tokens) == (kind, version, context)
    assert all(r.headers.get("authorization") == "Bearer sk-test" for r in api.requests)


def test_nobody_there_is_unknown_and_quick():
    found = asyncio.run(detect("http://127.0.0.1:9/v1"))
    assert found.kind == "unknown" and found.profile is None


@pytest.mark.parametrize("answer", [
    (200, b"\x1f\x8b not gzip", {"content-type": "application/json",
                                   "content-encoding": "gzip"}),  # httpx.DecodingError
    (200, b"[" * 200_000 + b"]" * 200_000),  # RecursionError in json.loads
], ids=["undecodable", "nested-too-deep"])
def test_an_answer_detection_cannot_read_is_unknown(answer):
    """Each escaped detect(), and complete() with it, as `internal error: ...`."""
    with FakeAPI({"/v1/models": lambda req: answer}) as api:
        found = asyncio.run(detect(api.url + "/v1"))
    assert found.kind == "unknown" and found.profile is None


def chat(req):
    """A whole reply, or the same one as server-sent events when it is streamed."""
    if not req.body.get("stream"):
        return 200, completion(DONE)
    events = "".join(f"data: {json.dumps(c)}\n\n" for c in streamed([DONE])) + "data: [DONE]\n\n"
    return 200, events, {"content-type": "text/event-stream"}


def run(recorded, config=None, **kw):
    """One run through an OpenAIModel at a fake server; the chat requests it sent, its events."""
    events = []
    with serve(recorded, chat=chat) as api:
        model = OpenAIModel("m", base_url=api.url + "/v1", api_key="sk-test", **kw)
        assert api.requests == []  # nothing is asked before the model is used
        result = Agent(model=model, config=config, on_event=events.append).run("x")
    assert result.status == "completed"
    chats = [r.body for r in api.requests if r.path == "/v1/chat/completions"]
    gets = [r.path for r in api.requests if r.method == "GET"]
    return chats, events, gets


@pytest.mark.parametrize("recorded,extra,format_type", [
    (LLAMA_CPP, {"cache_prompt": True, "repeat_penalty": 1.0}, "json_schema"),
    (LLAMA_CPP_PYTHON, {"repeat_penalty": 1.0}, "json_object"),
    (OLLAMA, {}, "json_schema"),
    (VLLM, {"repetition_penalty": 1.0}, "json_schema"),
    (LM_STUDIO, {"repeat_penalty": 1.0}, "json_schema"),
], ids=["llama.cpp", "llama-cpp-python", "ollama", "vllm", "lmstudio"])
def test_each_server_gets_its_best_json_mode_and_sampling(recorded, extra, format_type):
    chats, events, _ = run(recorded)
    body = chats[0]  # the grammar from the first try, llama-cpp-python's too
    assert {k: body[k] for k in ("cache_prompt", "repeat_penalty", "repetition_penalty")
            if k in body} == extra
    assert body["response_format"]["type"] == format_type
    if format_type == "json_object":  # llama-cpp-python's dialect: the schema beside the type
        assert body["response_format"]["schema"]["type"] == "object"
    start = next(e for e in events if e.type == "run_start")
    assert start.json_mode == "schema" and start.server["extra_body"] == extra


def test_a_costly_grammar_is_asked_for_only_after_a_reply_breaks_the_envelope():
    """A server declared grammar_costly (llama-cpp-python's, by a user who would rather have
    speed than every reply valid on the first try): a step is asked for without the
    grammar; a reply that
    breaks the envelope is asked for again under it, with the same messages (the model is
    not shown a mistake the grammar rules out); the next step goes without it again."""
    broken = json.dumps(step("NoSuchTool", {}, "hm"))
    replies = iter([broken, json.dumps(step("GetTimeTools", {"timezone": "UTC"}, "t")), DONE])
    sent = []

    def answer(req):
        sent.append(req.body)
        return 200, completion(next(replies))

    events = []
    with serve(LLAMA_CPP_PYTHON, chat=answer) as api:
        model = OpenAIModel("m", base_url=api.url + "/v1", api_key="sk-test",
                            grammar_costly=True)
        assert model.grammar_costly
        result = Agent(model=model, on_event=events.append).run("x")
    assert result.status == "completed" and result.answer == "4"
    asked = [b.get("response_format", {}).get("type") for b in sent]
    assert asked == [None, "json_object", None]
    assert not any(b.get("stream") for b in sent)  # whole: no counting request after it
    assert "schema" in [b for b in sent if "response_format" in b][0]["response_format"]
    assert sent[1]["messages"] == sent[0]["messages"]
    assert [e.json_mode for e in events if e.type == "model_reply"] == \
        ["prompt", "schema", "prompt"]
    assert [e.attempt for e in events if e.type == "reask"] == [1]
    start = next(e for e in events if e.type == "run_start")
    assert start.json_mode == "schema" and start.server["grammar_costly"] is True


@pytest.mark.parametrize("broken", [step("NoSuchTool", {}, "hm"),
                                    step("GetTimeTools", {"timezone": 5}, "t")],
                         ids=["tool", "arguments"])
def test_a_reply_that_breaks_the_envelope_under_the_grammar_is_shown_its_problem(broken):
    broken = json.dumps(broken)
    replies = iter([broken, broken, DONE])
    sent = []

    def answer(req):
        sent.append(req.body)
        return 200, completion(next(replies))

    with serve(LLAMA_CPP_PYTHON, chat=answer) as api:
        model = OpenAIModel("m", base_url=api.url + "/v1", api_key="sk-test",
                            grammar_costly=True)
        result = Agent(model=model, config=AgentConfig(max_reasks=2)).run("x")
    assert result.status == "completed"
    assert sent[1]["messages"] == sent[0]["messages"]
    shown = sent[2]["messages"][len(sent[0]["messages"]):]
    assert [m["role"] for m in shown] == ["assistant", "user"]
    assert shown[1]["content"].startswith("Your last reply was rejected")
    assert sent[2]["response_format"]["type"] == "json_object"


@pytest.mark.parametrize("config, first, cut", [
    (AgentConfig(json_mode="object"), step("NoSuchTool", {}, "hm"), False),  # no envelope held
    (AgentConfig(max_reasks=1), step("GetTimeTools", {"timezone": 5}, "t"), False),  # no
    # re-ask left after it, and the grammar may not hold what the arguments broke
    (AgentConfig(), DONE[:-9], True),  # cut at the length limit
], ids=["object-mode", "arguments", "cut"])
def test_a_mistake_the_grammar_does_not_rule_out_is_shown_with_its_note(config, first, cut):
    first = first if isinstance(first, str) else json.dumps(first)
    replies = iter([first, DONE])
    sent = []

    def answer(req):
        sent.append(req.body)
        text = next(replies)
        if req.body.get("stream"):  # object mode: a stream holds the thought to its cap
            events = "".join(f"data: {json.dumps(c)}\n\n" for c in streamed([text]))
            return 200, events + "data: [DONE]\n\n", {"content-type": "text/event-stream"}
        body = completion(text)
        if cut and len(sent) == 1:
            body["choices"][0]["finish_reason"] = "length"
        return 200, body

    with serve(LLAMA_CPP_PYTHON, chat=answer) as api:
        model = OpenAIModel("m", base_url=api.url + "/v1", api_key="sk-test",
                            grammar_costly=True)
        result = Agent(model=model, config=config).run("x")
    assert result.status == "completed", result.error
    assert "response_format" not in sent[0] and "response_format" in sent[1]
    shown = sent[1]["messages"][len(sent[0]["messages"]):]
    assert [m["role"] for m in shown] == ["assistant", "user"]
    assert shown[1]["content"].startswith("Your last reply was rejected")


def test_the_run_records_what_was_detected():
    _, events, gets = run(LLAMA_CPP)
    start = next(e for e in events if e.type == "run_start")
    assert start.server["kind"] == "llama.cpp" and start.server["version"] == "b5091-6a11a9c7"
    assert start.server["context_tokens"] == 8192
    assert gets == ["/v1/models", "/props"]  # once, for the whole life of the model


def test_what_the_user_set_wins_over_what_detection_sets():
    chats, events, _ = run(LLAMA_CPP, config=AgentConfig(json_mode="object"),
                           extra_body={"repeat_penalty": 1.3, "top_k": 1})
    assert chats[0]["response_format"] == {"type": "json_object"}
    assert chats[0]["repeat_penalty"] == 1.3 and chats[0]["top_k"] == 1
    assert chats[0]["cache_prompt"] is True


def test_an_unknown_server_keeps_every_endpoints_defaults():
    chats, events, _ = run(SOMEONE_ELSE)
    assert chats[0]["response_format"] == {"type": "json_object"}
    assert chats[0]["repeat_penalty"] == chats[0]["repetition_penalty"] == 1.0
    start = next(e for e in events if e.type == "run_start")
    assert start.server["kind"] == "unknown"


def test_detection_can_be_turned_off_and_openai_is_never_asked():
    chats, events, gets = run(LLAMA_CPP, detect=False)
    assert gets == [] and "cache_prompt" not in chats[0]
    assert next(e for e in events if e.type == "run_start").server is None
    assert OpenAIModel("gpt-4o-mini", api_key="sk-test").server is None


@pytest.mark.parametrize("recorded,whole,alone", [
    (LLAMA_CPP, True, False), (LLAMA_CPP_PYTHON, True, True), (OLLAMA, False, False),
    (SOMEONE_ELSE, False, False)], ids=["llama.cpp", "llama-cpp-python", "ollama", "unknown"])
def test_what_a_server_does_with_a_prompt_comes_from_its_profile_unless_declared(
        recorded, whole, alone):
    with serve(recorded) as api:
        model = OpenAIModel("m", base_url=api.url + "/v1", api_key="sk-test")
        assert (model.keeps_max_length, model.tool_results_alone) == (whole, alone)
        # no profile asks for a step without the grammar first: through llama-cpp-python's
        # server that made 6 of 38 replies break the envelope on their first try (issue 58)
        assert model.grammar_costly is False
        said = OpenAIModel("m", base_url=api.url + "/v1", api_key="sk-test",
                           keeps_max_length=False, tool_results_alone=False)
        assert (said.keeps_max_length, said.tool_results_alone) == (False, False)


def test_a_server_not_up_yet_is_asked_again_later(monkeypatch):
    import socket

    from jsonagent.models import servers

    with socket.socket() as s:  # a port nobody listens on, for now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test")
    assert model.default_json_mode == "object"  # nobody there: unknown, for now
    monkeypatch.setattr(servers, "ASK_AGAIN_S", 0.0)
    routes = {path: (lambda req, body=body: (200, body)) for path, body in LLAMA_CPP.items()}
    with FakeAPI(routes, port=port) as api:
        assert model.default_json_mode == "schema" and model.context_tokens == 8192
        assert model.server["kind"] == "llama.cpp"
        asked = len(api.requests)
        model.context_tokens
    assert len(api.requests) == asked  # found: kept


def test_the_model_asked_for_is_the_entry_read_not_the_first():
    listing = {"/v1/models": {"object": "list", "data": [
        {"id": "other", "object": "model", "owned_by": "someone"},
        {"id": "Qwen/Qwen2.5", "object": "model", "owned_by": "vllm", "max_model_len": 4096}]}}
    with serve(listing) as api:
        found = asyncio.run(detect(api.url + "/v1", model="Qwen/Qwen2.5"))
    assert (found.kind, found.context_tokens) == ("vllm", 4096)
