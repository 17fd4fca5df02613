"""What an endpoint sends in place of a reply's text ends the request on one line that says
what came (issue 58, from review): an error event mid-stream, a `data:` line that is not
JSON, a content that is no string. Each was `internal error: ...`."""

from __future__ import annotations

import json

import pytest

from jsonagent import Agent, ModelError
from jsonagent.models.openai import OpenAIModel
from jsonagent.testing import step

from openai_stub import OpenAIStub, completion, streamed

DONE = json.dumps(step("TaskCompleteTool", {"output": "ok"}, "done"))


def complete(answer, streams: bool = True):
    with OpenAIStub([answer]) as stub:
        m = OpenAIModel("m", base_url=stub.url, api_key="k", detect=False)
        try:
            return m.complete([{"role": "user", "content": "hi"}], None,
                              on_delta=(lambda _: None) if streams else None)
        finally:
            m.close()


def odd(chunk) -> tuple[int, list]:
    """A stream whose second chunk is `chunk` (a str: a data line as it stands)."""
    chunks = streamed([DONE[:9], DONE[9:]])
    chunks[1] = chunk
    return 200, chunks


@pytest.mark.parametrize("chunk,said", [
    ({"error": {"message": "the model is\n overloaded", "type": "server_error"}},
     "broke off a streamed reply with an error in place of a chunk: the model is overloaded"),
    ("{not json", "broke off a streamed reply with a data line that is not JSON (Expecting "),
])
def test_a_stream_broken_by_what_is_no_chunk_says_what_came(chunk, said):
    with pytest.raises(ModelError) as caught:
        complete(odd(chunk))
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_content_that_is_no_string_says_what_came():
    body = completion(DONE)
    body["choices"][0]["message"]["content"] = [{"type": "text", "text": "hi"}]
    with pytest.raises(ModelError) as caught:
        complete((200, body), streams=False)
    assert str(caught.value).endswith("/v1 returned no text: it answered the request with a "
                                      'content of list [{"type": "text", "text": "hi"}]')
    chunks = streamed([DONE[:9], 5])
    with pytest.raises(ModelError, match="answered a streamed request with a content of int 5"):
        complete((200, chunks))


def test_a_run_ends_on_the_stream_error_in_one_line_not_an_internal_error():
    with OpenAIStub([odd({"error": {"message": "overloaded"}})] * 5) as stub:
        m = OpenAIModel("m", base_url=stub.url, api_key="k", detect=False)
        result = Agent(model=m, tools=[], deltas=True).run("hi")
        m.close()
    assert result.status == "failed"
    assert not result.error.startswith("internal error"), result.error
    assert "an error in place of a chunk: overloaded" in result.error
