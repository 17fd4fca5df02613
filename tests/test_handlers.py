"""Handler bindings: Python functions, commands and HTTP requests, and every way they fail.
Commands are real subprocesses; HTTP goes to real servers on 127.0.0.1."""

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jsonagent import RunContext, SpecError, ToolError, Toolset
from jsonagent.tools.specs import ToolSpec, load_tools
from http_fakes import FakeAPI
from slow_tools import alive

PY = sys.executable


def one(tmp_path, spec, name="spec.json"):
    """Bind one spec from a file in tmp_path, as --tools would, and return its Tool."""
    (tmp_path / name).write_text(json.dumps(spec))
    ts = Toolset.build([tmp_path / name])
    return ts.get(spec["name"])


def call(t, **args):
    errors = t.spec.validate_args(args)
    assert not errors, errors
    return t.invoke(args, RunContext())


# --- python -----------------------------------------------------------------------------------

def test_python_handler_both_forms_sync_and_async(tmp_path):
    (tmp_path / "mymod.py").write_text(textwrap.dedent("""
        import asyncio
        def double(n):
            return n * 2
        async def triple(n):
            await asyncio.sleep(0)
            return n * 3
    """))
    params = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    (tmp_path / "s.json").write_text(json.dumps([
        {"name": "double", "description": "x2", "parameters": params, "handler": "mymod:double"},
        {"name": "triple", "description": "x3", "parameters": params,
         "handler": {"python": "mymod:triple"}}]))
    ts = Toolset.build([tmp_path / "s.json"])
    assert call(ts.get("double"), n=4) == 8
    assert call(ts.get("triple"), n=4) == 12


def test_bad_handler_path_is_a_clear_spec_error(tmp_path):
    spec = {"name": "x", "description": "d", "handler": {"python": "no_such_module_here:fn"}}
    with pytest.raises(SpecError, match=r"spec.json\[0\] \(x\): cannot load handler "
                                        r"'no_such_module_here:fn': ModuleNotFoundError"):
        one(tmp_path, spec)


def test_handler_object_needs_exactly_one_kind():
    with pytest.raises(SpecError, match="exactly one of the keys python, command, http, agent or a2a"):
        ToolSpec.from_dict({"name": "x", "handler": {"python": "a:b", "command": ["ls"]}})


# --- command ----------------------------------------------------------------------------------

ECHO_ARGS = "import json, sys; print(json.dumps({'argv': sys.argv[1:], 'stdin': sys.stdin.read()}))"
TEXT = {"type": "object", "properties": {"path": {"type": "string", "description": "p"},
                                         "n": {"type": "integer", "description": "n"}}}


def test_command_placeholders_are_whole_argv_elements_and_stdin_is_json(tmp_path):
    t = one(tmp_path, {"name": "echo", "description": "d", "parameters": TEXT,
                       "handler": {"command": [PY, "-c", ECHO_ARGS, "--path", "{path}", "{n}"],
                                   "stdin": "json"}})
    out = call(t, path="a b; rm -rf /", n=3)
    assert out["argv"] == ["--path", "a b; rm -rf /", "3"]  # no shell: the text is one argument
    assert json.loads(out["stdin"]) == {"path": "a b; rm -rf /", "n": 3}
    assert call(t, path="x")["argv"] == ["--path", "x"]  # an absent argument drops its element


def test_placeholder_inside_a_string_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"/handler/command/1: '--path=\{path\}': a placeholder "
                                        "must be the whole value"):
        ToolSpec.from_dict({"name": "x", "parameters": TEXT,
                            "handler": {"command": ["ls", "--path={path}"]}})


def test_placeholder_must_name_a_parameter():
    with pytest.raises(SpecError, match=r"placeholder \{nope\} names no parameter"):
        ToolSpec.from_dict({"name": "x", "parameters": TEXT, "handler": {"command": ["ls", "{nope}"]}})


def test_command_not_found_is_a_spec_error_at_load(tmp_path):
    with pytest.raises(SpecError, match=r"\(x\): command 'no-such-command-xyz' not found on PATH"):
        one(tmp_path, {"name": "x", "description": "d",
                       "handler": {"command": ["no-such-command-xyz"]}})


def test_non_zero_exit_is_an_error_with_stderr(tmp_path):
    t = one(tmp_path, {"name": "x", "description": "d", "handler": {"command": [
        PY, "-c", "import sys; sys.stderr.write('disk full\\n'); sys.exit(3)"]}})
    with pytest.raises(ToolError) as err:
        call(t)
    assert str(err.value) == f"command '{Path(PY).name}' exited with status 3: disk full"


def test_a_script_beside_the_spec_run_from_elsewhere_says_where_it_ran(tmp_path, monkeypatch):
    """`cwd` defaults to the caller's directory (which `git log` needs), so a script named
    beside the spec is not found from another one: the error says where, and what sets it
    (issue 58, finding 27)."""
    specs, elsewhere = tmp_path / "specs", tmp_path / "elsewhere"
    specs.mkdir()
    elsewhere.mkdir()
    (specs / "helper.py").write_text("print('helped')\n")
    monkeypatch.chdir(elsewhere)
    spec = {"name": "x", "description": "d", "handler": {"command": [PY, "helper.py"]}}
    with pytest.raises(ToolError) as err:
        call(one(specs, spec))
    said = str(err.value)
    assert said.startswith(f"command '{Path(PY).name}' exited with status 2: ")
    assert said.endswith(f" (it ran in {elsewhere}, the caller's directory, and 'helper.py' is "
                         f"beside the spec in {specs}: \"cwd\": \".\" in the handler runs it "
                         "there)")
    spec["handler"]["cwd"] = "."
    assert call(one(specs, spec, "beside.json")).strip() == "helped"


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = tmp_path / "slow.py"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(60)
    """))
    t = one(tmp_path, {"name": "slow", "description": "d",
                       "handler": {"command": [PY, str(script)], "timeout": 1}})
    t0 = time.monotonic()
    with pytest.raises(ToolError, match=r"command 'slow.py'|timed out after 1 s and was killed"):
        call(t)
    assert time.monotonic() - t0 < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the grandchild outlived the timeout"


def test_output_json_or_text(tmp_path):
    text = one(tmp_path, {"name": "t", "description": "d",
                          "handler": {"command": [PY, "-c", "print('plain words')"]}})
    assert call(text).strip() == "plain words"
    strict = one(tmp_path, {"name": "j", "description": "d", "handler": {
        "command": [PY, "-c", "print('plain words')"], "output": "json"}}, "j.json")
    with pytest.raises(ToolError, match=r"output of command '.*' was not JSON \(Expecting value "
                                        r"at line 1 column 1\): plain words"):
        call(strict)


def test_output_is_capped(tmp_path):
    t = one(tmp_path, {"name": "big", "description": "d", "handler": {
        "command": [PY, "-c", "print('x' * 50000)"], "max_output": 100}})
    out = call(t)
    assert out.startswith("x" * 100) and "[cut: " in out and len(out) < 200


def test_environment_is_an_allowlist_plus_what_the_spec_names(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("MY_TOKEN", "tok-1")
    t = one(tmp_path, {"name": "env", "description": "d", "handler": {
        "command": [PY, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
        "env": {"TOKEN": "${env:MY_TOKEN}", "MODE": "test"}}})
    env = call(t)
    assert env["TOKEN"] == "tok-1" and env["MODE"] == "test"
    assert "OPENAI_API_KEY" not in env and "MY_TOKEN" not in env and "PATH" in env


def test_missing_secret_fails_at_load_but_validate_does_not_need_it(tmp_path, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    spec = {"name": "s", "description": "d",
            "handler": {"command": [PY, "-c", "pass"], "env": {"K": "${env:NOT_SET_ANYWHERE}"}}}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    assert load_tools(tmp_path / "s.json")[0].name == "s"  # tools validate: syntax only
    with pytest.raises(SpecError, match=r"s.json\[0\] \(s\): /handler/env/K: environment "
                                        r"variable NOT_SET_ANYWHERE is not set"):
        Toolset.build([tmp_path / "s.json"])


def test_secret_syntax_and_secrets_in_argv_are_checked():
    with pytest.raises(SpecError, match=r"'\$\{ENV:X\}': secrets are written \$\{env:NAME\}"):
        ToolSpec.from_dict({"name": "x", "handler": {"command": ["ls"], "env": {"A": "${ENV:X}"}}})
    with pytest.raises(SpecError, match="secrets go in \"env\", never in argv"):
        ToolSpec.from_dict({"name": "x", "handler": {"command": ["ls", "${env:X}"]}})


# --- http -------------------------------------------------------------------------------------

PAGE = {"type": "object", "properties": {"title": {"type": "string", "description": "t"},
                                         "lang": {"type": "string", "description": "l"}},
        "required": ["title"]}


def http_tool(tmp_path, http, name="h", params=PAGE):
    return one(tmp_path, {"name": name, "description": "d", "parameters": params,
                          "handler": {"http": http}}, f"{name}.json")


def test_http_path_placeholder_is_one_encoded_segment_and_query_is_encoded(tmp_path):
    with FakeAPI({"/page/": lambda r: (200, {"path": r.path, "query": r.query})}) as api:
        t = http_tool(tmp_path, {"url": api.url + "/page/{title}/summary",
                                 "query": {"lang": "{lang}", "fixed": "1"}})
        out = call(t, title="../admin?x=1/", lang="en&evil=1")
        assert out["path"] == "/page/..%2Fadmin%3Fx%3D1%2F/summary"  # never another route
        assert out["query"] == {"lang": "en&evil=1", "fixed": "1"}
        assert call(t, title="A")["query"] == {"fixed": "1"}  # absent argument, no key


def test_http_json_body_template_and_secret_header(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", "k-123")
    with FakeAPI({"/search": lambda r: (200, {"body": r.body, "auth": r.headers.get("authorization")})}) as api:
        t = http_tool(tmp_path, {"method": "POST", "url": api.url + "/search",
                                 "headers": {"Authorization": "Bearer ${env:FAKE_KEY}"},
                                 "json": {"q": "{title}", "lang": "{lang}", "depth": "basic"}})
        out = call(t, title="jsonagent")
        assert out == {"body": {"q": "jsonagent", "depth": "basic"}, "auth": "Bearer k-123"}


def test_http_500_is_an_error_observation(tmp_path):
    with FakeAPI({"/": lambda r: (500, "upstream exploded")}) as api:
        t = http_tool(tmp_path, {"url": api.url + "/p/{title}", "query": {"key": "secret"}})
        with pytest.raises(ToolError) as err:
            call(t, title="x")
    assert str(err.value) == (f"HTTP 500 Internal Server Error from GET {api.url}/p/x: "
                              "upstream exploded")  # the query, which may hold a key, is left out


def test_http_missing_secret_fails_at_load(tmp_path, monkeypatch):
    monkeypatch.delenv("NOT_SET_KEY", raising=False)
    with pytest.raises(SpecError, match="/handler/http/query/appid: environment variable "
                                        "NOT_SET_KEY is not set"):
        http_tool(tmp_path, {"url": "http://127.0.0.1:9/x", "query": {"appid": "${env:NOT_SET_KEY}"}})


def test_http_secret_header_is_not_sent_to_another_host(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", "k-123")
    with FakeAPI({"/": lambda r: (200, {"headers": r.headers})}, host="localhost") as other, \
            FakeAPI({"/": lambda r: (302, "", {"location": other.url + "/landed"})}) as first:
        t = http_tool(tmp_path, {"url": first.url + "/start",
                                 "headers": {"X-Api-Key": "${env:FAKE_KEY}", "X-Plain": "p"}},
                      params={"type": "object", "properties": {}})
        out = call(t)
    assert first.requests[0].headers["x-api-key"] == "k-123"
    assert "x-api-key" not in out["headers"] and out["headers"]["x-plain"] == "p"


def test_http_response_size_is_capped(tmp_path):
    with FakeAPI({"/": lambda r: (200, "y" * 5000)}) as api:
        t = http_tool(tmp_path, {"url": api.url + "/big", "max_bytes": 1000},
                      params={"type": "object", "properties": {}})
        out = call(t)
    assert out.startswith("y" * 1000) and "larger than 1000 bytes" in out and len(out) < 1100


def test_http_timeout_and_connection_refused(tmp_path):
    def slow(r):
        time.sleep(3)
        return 200, {}

    with FakeAPI({"/": slow}) as api:
        t = http_tool(tmp_path, {"url": api.url + "/slow", "timeout": 0.5},
                      params={"type": "object", "properties": {}})
        with pytest.raises(ToolError, match=r"GET .*/slow: no answer within 0.5 s"):
            call(t)
    t = http_tool(tmp_path, {"url": "http://127.0.0.1:9/x"}, name="refused",
                  params={"type": "object", "properties": {}})
    with pytest.raises(ToolError, match=r"GET http://127.0.0.1:9/x: ConnectError"):
        call(t)


# --- return schemas ---------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["response", "returns", "return"])
def test_return_schema_keys_load_and_show_briefly(key):
    spec = ToolSpec.from_dict({"name": "w", "description": "Weather.", "parameters": {
        "type": "dict", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        key: {"type": "dict", "description": "The weather.", "properties": {
            "temp": {"type": "float", "description": "Celsius"}, "sky": {"type": "string"}}}})
    assert spec.returns["properties"]["temp"]["type"] == "number"
    assert spec.describe()["returns"] == {"type": "object", "description": "The weather.",
                                          "properties": {"temp": "number", "sky": "string"}}


def test_bfcl_spec_with_response_loads():
    bfcl = {"name": "calculate_triangle_area", "description": "Calculate the area of a triangle.",
            "parameters": {"type": "dict", "properties": {
                "base": {"type": "integer", "description": "The base."},
                "height": {"type": "integer", "description": "The height."}},
                "required": ["base", "height"]},
            "response": {"type": "dict", "properties": {"area": {"type": "float"}}}}
    assert ToolSpec.from_dict(bfcl).returns["properties"]["area"] == {"type": "number"}


def test_bad_return_schema_is_a_spec_error():
    with pytest.raises(SpecError, match=r"\(x\): /returns/type: not a valid JSON Schema"):
        ToolSpec.from_dict({"name": "x", "returns": {"type": "floaty"}})


def test_return_schema_never_rejects_real_output(tmp_path):
    t = one(tmp_path, {"name": "x", "description": "d", "returns": {"type": "integer"},
                       "handler": {"command": [PY, "-c", "print('not an integer')"]}})
    assert call(t).strip() == "not an integer"


def test_killing_a_group_kills_its_grandchildren_and_waits_only_when_asked():
    """processes.py is the one home of killing a command's group (a command tool's, an MCP
    server's last resort): a grandchild dies with it, and `wait=False` leaves the reaping to
    the caller."""
    import subprocess as _subprocess
    import sys as _sys
    import time as _time

    from jsonagent.tools.processes import kill_group, kill_pgid

    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); print(p.pid, flush=True); time.sleep(60)")
    for wait in (False, True):
        proc = _subprocess.Popen([_sys.executable, "-c", code], stdout=_subprocess.PIPE,
                                 start_new_session=True)
        grandchild = int(proc.stdout.readline())
        kill_group(proc, wait=wait)
        assert (proc.returncode is not None) == wait
        proc.wait(5)
        deadline = _time.monotonic() + 5
        while _time.monotonic() < deadline:  # dead: gone, or a zombie init has yet to reap
            try:
                with open(f"/proc/{grandchild}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except FileNotFoundError:
                break
            _time.sleep(0.05)
        else:
            raise AssertionError(f"grandchild {grandchild} outlived its group")
    kill_pgid(None)  # an MCP server that never started: nothing to kill
