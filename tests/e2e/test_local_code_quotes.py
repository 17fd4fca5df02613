"""A `"` inside a code string, on a real model: shown `{"code": "print("hi")"}`, the 135M
model writes the same raw quote, which closes the JSON string at `print(`. The local
backend takes that quote back, and the model writes a string that compiles instead."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'jsonagent[local,server]')")

from jsonagent.models import decoding  # noqa: E402
from jsonagent.models.local import LocalConfig, LocalModel  # noqa: E402

SCHEMA = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"],
          "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "code", "schema": SCHEMA}}
MESSAGES = [{"role": "user", "content": "Code that prints hi"},
            {"role": "assistant", "content": '{"code": "print("hi")"}'},
            {"role": "user", "content": "Code that prints bye"}]


@pytest.fixture(scope="module")
def small_model(gguf):
    model = LocalModel(gguf, LocalConfig(n_ctx=2048, max_tokens=60, kv_cache=False))
    if model._matcher({"type": "object"}) is None:
        pytest.skip("llguidance is not installed: the take-back needs our sampling loop")
    yield model
    model.close()


def test_a_quote_that_would_cut_the_code_short_is_taken_back(small_model, monkeypatch):
    code = json.loads(small_model.complete(MESSAGES, FORMAT).text)["code"]
    compile(code, "<code>", "exec")  # whole: the quote became \" or '
    assert "bye" in code
    monkeypatch.setattr(decoding, "TAKEBACKS", 0)  # the same request without the take-back
    cut = json.loads(small_model.complete(MESSAGES, FORMAT).text)["code"]
    with pytest.raises(SyntaxError):
        compile(cut, "<code>", "exec")
