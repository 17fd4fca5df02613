"""The server rows of issue 37, item 1: the openai backend against `llama_cpp.server`, as shipped
and with each change that brings its requests to what the in-process backend feeds the model,
alone and together (bench/token_diff.py shows what each one changes in the tokens).

A variant is OpenAIModel keywords and AgentConfig fields; neither is a user-facing switch made
for the benchmark: the keywords declare what an endpoint does, which server detection (issue
37, item 6) sets for the servers it knows.

    server                the backend as shipped: server detection finds llama-cpp-python and
                          declares the changes below (servers.py)
    server-before         neither change, as round 6 shipped it: schema mode, the tool-call
                          form, the reply streamed so the loop can hold the thought to its cap
                          (llama-cpp-python's server sends no usage in a stream, so each step
                          also sends a one-token request to count the prompt)
    server-results-alone  only this change: each step sent as its JSON alone, its result in
                          the tool turn with its id (`tool_results_alone`): the prompt is token
                          for token the in-process one. Without it, the template adds the call
                          again after the JSON, with its arguments JSON-encoded twice
    server-whole          only this change: whole replies (`keeps_max_length`: the server's
                          grammar holds the thought's maxLength, as llguidance does
                          in-process), so no stream and no counting request, which left the
                          server's cache without the reply
    server-free-first     a step asked for without the schema's grammar first, and under it
                          only after a reply that breaks the envelope (`grammar_costly`), as
                          rounds 10 to 18 shipped it; `server` has the grammar on every request
                          again since issue 58
"""

from __future__ import annotations

SERVER_VARIANTS: dict[str, tuple[dict, dict]] = {
    "server": ({}, {}),
    "server-before": ({"tool_results_alone": False, "keeps_max_length": False,
                       "grammar_costly": False}, {}),
    "server-results-alone": ({"tool_results_alone": True, "keeps_max_length": False,
                              "grammar_costly": False}, {}),
    "server-whole": ({"tool_results_alone": False, "keeps_max_length": True,
                      "grammar_costly": False}, {}),
    "server-free-first": ({"grammar_costly": True}, {}),
}
"""Name: (OpenAIModel keywords, AgentConfig fields on top of schema mode)."""


def server_model(name: str, base_url: str, model: str = "local"):
    from jsonagent.models.openai import OpenAIModel

    keywords, _ = SERVER_VARIANTS[name]
    return OpenAIModel(model, base_url=base_url, api_key="sk-local", temperature=0.0, **keywords)


def server_config(name: str) -> dict:
    return {"json_mode": "schema", **SERVER_VARIANTS[name][1]}
