"""The public names are a promise: changing them is a decision, not an accident."""

import subprocess
import sys

import jsonagent
import jsonagent.store
import jsonagent.testing
import jsonagent.tracing


def test_exported_names():
    assert sorted(jsonagent.__all__) == [
        "A2AAgent", "Agent", "AgentConfig", "ArgError", "CancelToken", "Cancelled", "ConfigError",
        "JsonAgentError", "LimitReached", "Model", "ModelError", "ModelReply", "Pending", "ResponseFormatRejected", "RunContext", "RunError", "RunResult",
        "RunState", "Session", "SessionBusy", "SpecError", "Step", "StepRecord", "Store", "Tool",
        "ToolCall", "ToolError", "ToolSpec", "Toolset", "Usage", "UsageLimits", "UserError",
        "Veto",
        "core_tools", "load_tools", "open_store", "parse_reply", "read_journal", "tool",
    ]
    for name in jsonagent.__all__:
        assert getattr(jsonagent, name) is not None
    assert jsonagent.testing.__all__ == ["ScriptedModel", "step"]
    assert jsonagent.tracing.__all__ == ["instrument", "enabled", "capture_content", "flush"]
    assert jsonagent.store.__all__ == ["Store", "open_store", "RunInfo", "SessionInfo", "Owner"]


def test_import_is_light():
    """No SDK, schema engine or sandbox is loaded, and nothing is written, by `import jsonagent`."""
    code = ("import sys, jsonagent; heavy = {'openai', 'jsonschema', 'sandbox', 'llama_cpp', 'rich', "
            "'typer', 'json_repair', 'sqlite3', 'genai_prices'} & set(sys.modules); print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
