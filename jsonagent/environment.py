"""Every environment variable jsonagent reads or sets, and what it does: their one home.

The modules that read a variable name it where they read it; this table is what a person
reads (the site's environment reference is rendered from it), and a test keeps the two
together: a variable named in the code and missing here, or listed here and named nowhere,
fails it (tests/test_docs.py).
"""

from __future__ import annotations

VARIABLES: dict[str, str] = {
    "JSONAGENT_HOME": "Where jsonagent keeps its state: pulled models, the run store, the prompt "
                      "cache, the node id. Default: `$XDG_DATA_HOME/jsonagent` "
                      "(`~/.local/share/jsonagent`).",
    "XDG_DATA_HOME": "The base of the default `JSONAGENT_HOME` on Linux.",
    "JSONAGENT_MODEL": "The model when none is given (`--model`, `Agent(model=...)`): any name "
                       "`--model` takes.",
    "JSONAGENT_LOCAL_MODEL": "What `--model local` loads: a catalog name or a `.gguf` path. "
                             "Default: `qwen2.5-coder-1.5b`.",
    "JSONAGENT_THREADS": "Threads a local model decodes with (`LocalConfig.n_threads`). "
                         "Default: every core.",
    "OPENAI_BASE_URL": "The OpenAI-compatible endpoint (`--base-url`).",
    "OPENAI_API_KEY": "The endpoint's key (`--api-key`); a local `--base-url` needs none.",
    "JSONAGENT_STORE": "Where runs are kept (`--store`): a SQLite file, or a "
                       "`postgresql://` URL shared by several servers. Default: "
                       "`$JSONAGENT_HOME/jsonagent.db`.",
    "JSONAGENT_NODE_ID": "This node's id in the store (`--node-id`). Default: one made up "
                         "once and kept in `$JSONAGENT_HOME`.",
    "JSONAGENT_SERVER_TOKEN": "The bearer token `jsonagent serve` requires (`--token`).",
    "JSONAGENT_DEBUG": "Any value: tracebacks instead of one-line errors, as `--debug`.",
    "JSONAGENT_MCP_START_TIMEOUT": "Seconds an MCP server may take to start. Default: 30.",
    "JSONAGENT_MCP_CALL_TIMEOUT": "Seconds one MCP tool call may take. Default: 60.",
    "JSONAGENT_A2A_TIMEOUT": "Seconds one call of a remote A2A agent may take. Default: 300.",
    "JSONAGENT_IDEMPOTENCY_KEY": "Set for a command tool: the call's key (`RUN.STEP.INDEX`), "
                                 "the same when a call is run again after a crash.",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "Turns tracing on, and where OTLP/HTTP goes (`--otel` "
                                   "defaults it to `http://localhost:4318`).",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "Turns tracing on, for traces only.",
    "OTEL_TRACES_EXPORTER": "Turns tracing on; `none` turns it off.",
    "OTEL_METRICS_EXPORTER": "`none` leaves the metrics out (Jaeger and Phoenix take none).",
    "OTEL_SERVICE_NAME": "The service's name in traces. Default: `jsonagent`.",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "`true`: spans carry prompts, replies, "
                                                         "tool arguments and results.",
    "TRACEPARENT": "The trace a process started in: its runs' spans are that trace's "
                   "children (set for a batch's workers).",
}
