"""Loading tools (--tools files and directories, --no-core-tools) and the authoring commands:
tools lint, tools scaffold, tools export."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jsonagent import SpecError, Toolset, core_tools
from jsonagent.tools.toolset import default_tools_path
from jsonagent.tools.lint import lint_file

REPO = Path(__file__).resolve().parent.parent


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "jsonagent", *map(str, args)],
                          capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(REPO), os.environ.get("PYTHONPATH", "")])})


def write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


NOTE = {"name": "note", "description": "Take a note.", "parameters": {
    "type": "object", "properties": {"text": {"type": "string", "description": "The note."}},
    "required": ["text"]}, "handler": {"command": ["true"]}}


# --- loading ----------------------------------------------------------------------------------

def test_a_directory_loads_its_spec_files_and_skips_json_schemas(tmp_path):
    write(tmp_path / "a.json", NOTE)
    write(tmp_path / "b.json", [{**NOTE, "name": "note2"}])
    write(tmp_path / "schema.json", {"$schema": "https://json-schema.org/draft/2020-12/schema"})
    assert Toolset.build([tmp_path]).names == ["note", "note2", "TaskCompleteTool"]


def test_the_bundled_specs_given_again_are_deduplicated_not_a_collision(tmp_path):
    ts = Toolset.build([core_tools(), default_tools_path(), write(tmp_path / "n.json", NOTE)])
    assert ts.names == [s.name for s in core_tools()] + ["note"]
    changed = {"name": "GetTimeTools", "description": "Another clock.", "handler": {"command": ["true"]}}
    with pytest.raises(SpecError, match=r"c.json\[0\] \(GetTimeTools\): duplicate tool name, "
                                        r"first defined at .*core_function.json\[0\]"):
        Toolset.build([core_tools(), write(tmp_path / "c.json", changed)])


def test_cli_tools_add_to_the_built_ins_unless_no_core_tools(tmp_path):
    write(tmp_path / "n.json", NOTE)
    both = cli("tools", "list", "--tools", tmp_path, "-o", "json")
    assert both.returncode == 0, both.stderr
    assert [t["name"] for t in json.loads(both.stdout)] == [s.name for s in core_tools()] + ["note"]
    alone = cli("tools", "list", "--tools", tmp_path / "n.json", "--no-core-tools", "-o", "json")
    assert [t["name"] for t in json.loads(alone.stdout)] == ["note", "TaskCompleteTool"]
    again = cli("tools", "list", "--tools", default_tools_path(), "-o", "json")
    assert again.returncode == 0 and len(json.loads(again.stdout)) == 4


def test_cli_missing_secret_is_one_line_exit_2(tmp_path):
    spec = {**NOTE, "handler": {"http": {"url": "https://example.invalid/x",
                                         "headers": {"K": "${env:SURELY_NOT_SET_123}"}}}}
    proc = cli("tools", "list", "--tools", write(tmp_path / "s.json", spec))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {tmp_path / 's.json'}[0] (note): /handler/http/headers/K: environment variable "
        "SURELY_NOT_SET_123 is not set (the spec reads it as ${env:SURELY_NOT_SET_123})"]
    assert cli("tools", "validate", tmp_path / "s.json").returncode == 0  # no secret needed


# --- lint -------------------------------------------------------------------------------------

def test_lint_bundled_specs_are_clean():
    proc = cli("tools", "lint", REPO / "core_function.json", REPO / "tool_specs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok: ")


def test_lint_reports_every_kind_of_finding(tmp_path):
    bad = write(tmp_path / "bad.json", [
        {"name": "weather.get", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["c", "f", 3], "description": "Unit."},
            "days": {"type": "integer", "minimum": 1, "default": 0, "description": "Days."}}}},
        {"name": "strict_one", "description": "Strict.", "strict": True, "parameters": {
            "type": "object", "properties": {
                "q": {"type": "string", "minLength": 2, "description": "Query."},
                "n": {"type": "integer", "description": "Count."}}, "required": ["q"]}}])
    proc = cli("tools", "lint", bad)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    where = f"{bad}[0] (weather.get): "
    assert lines[:5] == [
        where + "/name: OpenAI rejects 'weather.get' (it allows ^[a-zA-Z0-9_-]{1,64}$); try 'weather_get'",
        where + "/description: missing; the model picks tools by their description",
        where + "/parameters/properties/city: parameter 'city' has no description",
        where + "/parameters/properties/unit: enum value 3 is integer, not string",
        where + "/parameters/properties/days: default 0 does not fit its own schema: "
                "0 is less than the minimum of 1"]
    strict = [line for line in lines if "(strict_one)" in line]
    assert any("'minLength' is not supported" in line for line in strict)
    assert any("every property must be required; n is optional" in line for line in strict)


def test_lint_checks_a_default_beside_a_ref_against_the_whole_schema(tmp_path):
    # a recursive model keeps its $refs: the default's schema is read in its document
    node = {"type": "object", "description": "A node.", "properties": {
        "kids": {"type": "array", "description": "Kids.", "items": {"$ref": "#/$defs/n"}}}}
    spec = write(tmp_path / "tree.json", {"name": "tree", "description": "A tree.",
                                          "parameters": {"type": "object", "$defs": {"n": node},
                                                         "properties": {"root": {
                                                             "$ref": "#/$defs/n",
                                                             "description": "The root.",
                                                             "default": {"kids": [1]}}}}})
    assert lint_file(spec) == [f"{spec}[0] (tree): /parameters/properties/root: default "
                               '{"kids": [1]} does not fit its own schema: 1 is not of type '
                               "'object'"]


def test_lint_strict_flag_and_exit_codes(tmp_path):
    ok = write(tmp_path / "ok.json", {**NOTE})
    assert cli("tools", "lint", ok).returncode == 0
    assert cli("tools", "lint", "--strict", ok).returncode == 0
    optional = write(tmp_path / "opt.json", {**NOTE, "parameters": {**NOTE["parameters"], "required": []}})
    assert cli("tools", "lint", optional).returncode == 0
    assert cli("tools", "lint", "--strict", optional).returncode == 1
    (tmp_path / "broken.json").write_text("{not json")
    proc = cli("tools", "lint", tmp_path / "broken.json")
    assert proc.returncode == 2 and "invalid JSON" in proc.stderr
    assert cli("tools", "lint", tmp_path / "missing.json").returncode == 2


# --- scaffold and export ----------------------------------------------------------------------

def test_scaffold_writes_a_stub_whose_signature_matches_the_schema(tmp_path):
    spec = write(tmp_path / "w.json", {
        "name": "get-weather", "description": "Weather for a city.", "parameters": {
            "type": "object", "properties": {
                "city": {"type": "string", "description": "The city."},
                "units": {"type": "string", "enum": ["metric", "imperial"], "default": "metric"},
                "days": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["city"]},
        "returns": {"type": "object"}})
    out = tmp_path / "weather_impl.py"
    proc = cli("tools", "scaffold", spec, "--out", out)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert ("def get_weather(city: str, units: Literal['metric', 'imperial'] = 'metric', "
            "days: int | None = None, tags: list[str] | None = None) -> dict[str, Any]:") in text
    assert '"handler": "weather_impl:get_weather"' in text
    compile(text, str(out), "exec")
    # the stub, once bound, is a tool whose exported schema matches the spec's
    import importlib.util

    from jsonagent import tool

    loader = importlib.util.spec_from_file_location("weather_impl", out)
    module = importlib.util.module_from_spec(loader)
    sys.modules["weather_impl"] = module
    try:
        loader.loader.exec_module(module)
        exported = tool(module.get_weather).spec.parameters
    finally:
        del sys.modules["weather_impl"]
    assert exported["required"] == ["city"]
    assert exported["properties"]["units"]["enum"] == ["metric", "imperial"]
    assert cli("tools", "scaffold", spec, "--out", out).returncode == 2  # no silent overwrite


def test_export_prints_the_spec_of_a_tool_function(tmp_path):
    (tmp_path / "mytools.py").write_text(
        "from jsonagent import tool\n\n"
        "@tool\n"
        "def add(a: int, b: int = 0) -> int:\n"
        "    '''Add two numbers.\n\n    Args:\n        a: the first\n        b: the second\n    '''\n"
        "    return a + b\n")
    proc = cli("tools", "export", "mytools:add", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    spec = json.loads(proc.stdout)
    assert spec["name"] == "add" and spec["handler"] == "mytools:add"
    assert spec["parameters"]["properties"]["a"] == {"type": "integer", "description": "the first"}
    write(tmp_path / "exported.json", spec)
    assert cli("tools", "lint", tmp_path / "exported.json", cwd=tmp_path).returncode == 0
    bad = cli("tools", "export", "mytools:nothing", cwd=tmp_path)
    assert bad.returncode == 2 and "cannot load 'mytools:nothing'" in bad.stderr
