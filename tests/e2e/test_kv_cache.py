"""The system prompt's KV cache on disk, on a real model: same replies with it on or off."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'jsonagent[local,server]')")

from jsonagent.envelope import response_format  # noqa: E402
from jsonagent.models.kvcache import kv_dir  # noqa: E402
from jsonagent.models.local import LocalConfig, LocalModel  # noqa: E402
from jsonagent.prompt import system_prompt  # noqa: E402
from jsonagent.tools.toolset import Toolset  # noqa: E402

QUESTIONS = ["What time is it in UTC?", "Say hello to the user and finish."]


def _replies(gguf, kv_cache: bool) -> list:
    """Each question in a fresh model, as a fresh process would see it."""
    toolset = Toolset.build(None)
    fmt = response_format("schema", toolset, thought_max=120)
    out = []
    for question in QUESTIONS:
        model = LocalModel(gguf, LocalConfig(n_ctx=2048, max_tokens=96, kv_cache=kv_cache))
        try:
            messages = [{"role": "system", "content": system_prompt(toolset)},
                        {"role": "user", "content": question}]
            out.append(model.complete(messages, fmt))
        finally:
            model.close()
    return out


def test_replies_are_identical_with_the_cache_on_and_off(gguf, caplog):
    off = _replies(gguf, kv_cache=False)
    assert not kv_dir().exists()
    on = _replies(gguf, kv_cache=True)  # the first evaluates and saves, the second loads
    assert [r.text for r in on] == [r.text for r in off]
    assert len(list(kv_dir().glob("*.kv"))) == 1
    assert on[0].usage.cached_tokens == 0
    assert on[1].usage.cached_tokens > 0.8 * on[1].usage.prompt_tokens  # loaded, not evaluated
    assert [r.usage.cached_tokens for r in off] == [0, 0]

    (saved,) = kv_dir().glob("*.kv")
    saved.write_bytes(saved.read_bytes()[: saved.stat().st_size // 3])  # a torn write
    with caplog.at_level(logging.WARNING, logger="jsonagent.models"):
        again = _replies(gguf, kv_cache=True)
    assert [r.text for r in again] == [r.text for r in off]
    assert sum("ignoring the prompt cache" in r.getMessage() for r in caplog.records) == 1
    assert again[0].usage.cached_tokens == 0 and again[1].usage.cached_tokens > 0
