"""MCP servers as tool sources: real server processes written with the SDK
(tests/mcp_servers/demo_server.py), over stdio and streamable HTTP. No mocks.

Calls time out after 1.5 s here. Start-up gets longer: a Python SDK server takes a few
seconds to import on a busy 2-core machine, and that is not what these tests measure."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jsonagent import Agent, ConfigError, SpecError, ToolError, Toolset, tool
from jsonagent.testing import ScriptedModel, step
from jsonagent.tools.mcp import MCPServer, load_config
from test_handlers import alive

pytest.importorskip("mcp")

PY = sys.executable
SERVER = str(Path(__file__).parent / "mcp_servers" / "demo_server.py")
START, CALL = 30, 1.5
DONE = step("TaskCompleteTool", {"output": "done"}, "done")


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def stdio(tmp_path, *extra, **kw) -> MCPServer:
    return MCPServer([PY, SERVER, "--pid-file", str(tmp_path / "server.pid"), *extra],
                     start_timeout=kw.pop("start_timeout", START), call_timeout=CALL, **kw)


def server_pid(tmp_path) -> int:
    return int((tmp_path / "server.pid").read_text())


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One stdio server for the tests that only call tools that leave it healthy."""
    server = stdio(tmp_path_factory.mktemp("shared"))
    tools = {t.name: t for t in server.open()}
    yield server, tools
    server.close()


def test_tools_are_listed_with_their_schemas(shared):
    server, tools = shared
    assert {"add", "echo", "forecast", "picture", "fail", "crash", "sleep"} <= set(tools)
    add = tools["add"]
    assert add.spec.origin == f"mcp:{server.name}"
    assert add.spec.validate_args({"a": 1, "b": "2"})[0].message == 'expected integer, got string "2"'
    assert add.spec.validate_args({"a": 1, "b": 2, "c": 3})  # undeclared arguments are refused


def test_results_map_to_observations(shared):
    _, tools = shared
    assert tools["echo"].fn(text="hi") == {"result": "hi"}  # structuredContent when present
    assert tools["forecast"].fn(city="Oslo") == {"city": "Oslo", "celsius": 21.5}
    assert tools["picture"].fn() == "[image image/png, 24 bytes, not shown]"
    with pytest.raises(ToolError, match=rf"^MCP server {Path(PY).name} demo_server.py: fail reported an "
                                        "error: .*cannot do that: bad input$"):
        tools["fail"].fn(reason="bad input")


def test_a_call_that_never_answers_times_out_and_the_server_stays_usable(shared):
    _, tools = shared
    t0 = time.monotonic()
    with pytest.raises(ToolError, match=r"MCP server .*: sleep got no answer within 1.5 s"):
        tools["sleep"].fn(seconds=60)
    assert time.monotonic() - t0 < 5
    assert tools["add"].fn(a=2, b=3) == {"result": 5}


def test_server_crash_mid_call_is_a_clear_error_and_leaves_no_process(tmp_path):
    server = stdio(tmp_path)
    tools = {t.name: t for t in server.open()}
    pid = server_pid(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(ToolError) as err:
        tools["crash"].fn()
    assert time.monotonic() - t0 < 5
    assert "crash failed" in str(err.value) and "demo server: crashing on purpose" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ToolError, match="not running|failed"):  # later calls fail fast too
        tools["add"].fn(a=1, b=2)
    server.close()
    assert wait_gone(pid)


def test_a_server_that_never_answers_at_start_is_a_clear_error_and_is_killed(tmp_path):
    server = stdio(tmp_path, "--hang-at-start", start_timeout=8)
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"MCP server .*: no answer within 8 s of starting"):
        server.open()
    assert time.monotonic() - t0 < 20
    assert wait_gone(server_pid(tmp_path))
    assert not server.is_open


def test_a_command_that_is_not_found_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"MCP server no-such-mcp-server-xyz: command not found"):
        MCPServer(["no-such-mcp-server-xyz"], start_timeout=5).open()


def test_environment_is_an_allowlist_plus_what_the_entry_names(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("GH_TOKEN_SRC", "gh-123")
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"demo": {
        "command": PY, "args": [SERVER, "--pid-file", str(tmp_path / "server.pid")],
        "env": {"GH_TOKEN": "${env:GH_TOKEN_SRC}"}}}}))
    [server] = load_config(config, start_timeout=START, call_timeout=CALL)
    with server:
        tools = {t.name: t for t in server.open()}
        assert tools["getenv"].fn(name="GH_TOKEN") == {"result": "gh-123"}
        assert tools["getenv"].fn(name="OPENAI_API_KEY") == {"result": ""}
        assert tools["getenv"].fn(name="PATH")["result"]
    assert wait_gone(server_pid(tmp_path))


def test_config_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mcpServers": {"x": {"args": []}}}))
    with pytest.raises(ConfigError, match=r"mcpServers.x: give either command .* or url"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read MCP config"):
        load_config(tmp_path / "missing.json")


def test_collisions_name_both_sources_and_a_prefix_avoids_them(tmp_path):
    server = stdio(tmp_path)
    echo = tool(lambda text: text, name="echo", description="Local echo.")
    with pytest.raises(SpecError, match=r"mcp:.*\(echo\): duplicate tool name, first defined "
                                        r"at .*test_mcp"):
        Toolset.build([echo, server])
    assert wait_gone(server_pid(tmp_path))  # building failed, so what it opened is closed
    server = stdio(tmp_path, prefix="demo_")
    with Toolset.build([echo, server]) as ts:
        assert "echo" in ts and "demo_echo" in ts
        assert ts.get("demo_add").fn(a=1, b=1) == {"result": 2}


# --- streamable HTTP --------------------------------------------------------------------------

from ports import free_port  # noqa: E402,F401  one port block per xdist worker


@pytest.fixture
def http_server(tmp_path):
    port = free_port()
    proc = subprocess.Popen([PY, SERVER, "--http", str(port)], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("the streamable-HTTP MCP server did not start")
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the test killed it already
        proc.wait(timeout=10)


def test_streamable_http_server(http_server):
    url, _ = http_server
    with MCPServer(url, start_timeout=10, call_timeout=CALL) as server:
        tools = {t.name: t for t in server.open()}
        assert tools["add"].fn(a=20, b=22) == {"result": 42}
        with pytest.raises(ToolError, match="sleep got no answer within 1.5 s"):
            tools["sleep"].fn(seconds=60)


def test_streamable_http_server_that_dies_mid_run(http_server):
    url, proc = http_server
    with MCPServer(url, start_timeout=10, call_timeout=CALL) as server:
        tools = {t.name: t for t in server.open()}
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        t0 = time.monotonic()
        with pytest.raises(ToolError, match=r"MCP server .*: add "):
            tools["add"].fn(a=1, b=2)
        assert time.monotonic() - t0 < 5


def test_unreachable_url_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"MCP server http://127.0.0.1:9/mcp: "):
        MCPServer("http://127.0.0.1:9/mcp", start_timeout=5).open()


# --- in a run ---------------------------------------------------------------------------------

def test_one_run_drives_a_command_spec_a_tool_function_and_an_mcp_tool(tmp_path):
    (tmp_path / "specs.json").write_text(json.dumps({
        "name": "word_count", "description": "Count the words of a text.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                       "required": ["text"]},
        "handler": {"command": [PY, "-c", "import json,sys; print(json.dumps("
                                "{'words': len(json.load(sys.stdin)['text'].split())}))"],
                    "stdin": "json", "timeout": 10}}))

    @tool
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    model = ScriptedModel([step("word_count", {"text": "one two three"}),
                           step("shout", {"text": "hi"}),
                           step("add", {"a": 3, "b": 4}),
                           step("forecast", {"city": 5}),  # invalid: validated like any tool
                           step("forecast", {"city": "Rome"}),
                           step("TaskCompleteTool", {"output": "3 words, HI, 7, 21.5"})])
    with Agent(model=model, tools=[tmp_path / "specs.json", shout, stdio(tmp_path)]) as agent:
        assert '"name": "add"' in agent.system_prompt
        result = agent.run("go")
        pid = server_pid(tmp_path)
    assert result.status == "completed", result
    assert [s.observation for s in result.steps[:3]] == [{"words": 3}, "HI", {"result": 7}]
    assert result.steps[3].observation == {"city": "Rome", "celsius": 21.5}
    assert result.stats.reasks == 1
    assert wait_gone(pid)


def test_the_calls_key_reaches_the_server_in_the_requests_meta(tmp_path, shared):
    """Asserted where the server received it: the `_meta` its request context held."""
    model = ScriptedModel([step("echo", {"text": "hi"}), step("meta", {}), step("meta", {}),
                           DONE])
    with Agent(model=model, tools=[stdio(tmp_path)]) as agent:
        result = agent.run("go")
    run = result.run_id
    assert result.status == "completed", result
    got = [s.observation for s in result.steps[1:3]]
    assert [g.get("idempotency_key") for g in got] == [f"{run}.2.0", f"{run}.3.0"]
    assert "idempotency_key" not in shared[1]["meta"].fn()  # outside a run: no key to send


def cli(*args, timeout=90, **kw):
    return subprocess.run([PY, "-m", "jsonagent", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ,
                          "JSONAGENT_MCP_START_TIMEOUT": str(START),
                          "JSONAGENT_MCP_CALL_TIMEOUT": str(CALL)}, **kw)


def script(tmp_path, *replies) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([json.dumps(r) for r in replies]))
    return f"scripted:{path}"


def mcp_flag(tmp_path) -> str:
    return f"{PY} {SERVER} --pid-file {tmp_path / 'server.pid'}"


@pytest.mark.parametrize("replies, code", [
    ([step("add", {"a": 1, "b": 2}), DONE], 0),          # normal end
    ([step("add", {"a": 1, "b": 2})], 7),                # the model fails for good: exit 7
    ([step("crash"), step("add", {"a": 1, "b": 2}), DONE], 0),  # the server dies mid-run
    ([step("sleep", {"seconds": 60}), DONE], 0),         # a call that never answers
])
def test_cli_run_leaves_no_server_process(tmp_path, replies, code):
    proc = cli("run", "go", "--model", script(tmp_path, *replies), "--mcp", mcp_flag(tmp_path),
               "--no-input", "--output", "json")
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    assert wait_gone(server_pid(tmp_path))


def test_cli_ctrl_c_during_a_call_leaves_no_server_process(tmp_path):
    proc = subprocess.Popen([PY, "-m", "jsonagent", "run", "go", "--no-input", "--model",
                             script(tmp_path, step("sleep", {"seconds": 60}), DONE),
                             "--mcp", mcp_flag(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "JSONAGENT_MCP_START_TIMEOUT": str(START)})
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "server.pid.sleeping").exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert wait_gone(server_pid(tmp_path))


def test_cli_tools_list_and_call_with_mcp(tmp_path):
    listed = cli("tools", "list", "--mcp", mcp_flag(tmp_path), "--mcp-prefix", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    names = [t["name"] for t in json.loads(listed.stdout)]
    assert "GetTimeTools" in names and "demo_server_add" in names
    assert wait_gone(server_pid(tmp_path))
    called = cli("tools", "call", "add", "--args", '{"a": 2, "b": 2}', "--mcp", mcp_flag(tmp_path))
    assert called.returncode == 0 and json.loads(called.stdout) == {"result": 4}, called.stderr
    checked = cli("tools", "check", "--tool", "add", "--args", '{"a": "x"}', "--mcp",
                  mcp_flag(tmp_path))
    assert checked.returncode == 1 and 'invalid: /a: expected integer, got string "x"' in checked.stdout


def test_without_the_sdk_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r"pip install 'jsonagent\[mcp\]'"):
        MCPServer(["anything"]).open()
