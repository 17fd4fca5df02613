"""@tool functions, handlers in spec files, built-ins, and one toolset for all of them."""

import json
from datetime import date

import pytest
from pydantic import BaseModel

from jsonagent import RunContext, SpecError, ToolError, Toolset, core_tools, tool
from jsonagent.state import Pending
from jsonagent.tools.core import get_time


class Point(BaseModel):
    x: int
    y: int


@tool
def distance(a: Point, b: Point, squared: bool = False) -> float:
    """Distance between two points.

    Args:
        a: the first point
        b: the second point,
            given as {x, y}
        squared: skip the square root
    """
    d = (a.x - b.x) ** 2 + (a.y - b.y) ** 2
    return d if squared else d ** 0.5


def test_tool_spec_from_signature_and_docstring():
    spec = distance.spec
    assert spec.name == "distance"
    assert spec.description == "Distance between two points."
    props = spec.parameters["properties"]
    assert props["b"]["description"] == "the second point, given as {x, y}"
    assert props["squared"] == {"type": "boolean", "default": False, "description": "skip the square root"}
    assert spec.parameters["required"] == ["a", "b"]
    assert spec.parameters["additionalProperties"] is False


def test_tool_nested_model_is_inlined_and_validated():
    props = distance.spec.parameters["properties"]
    assert props["a"]["properties"]["x"]["type"] == "integer"
    assert "$ref" not in json.dumps(distance.spec.parameters)
    errors = distance.spec.validate_args({"a": {"x": 0, "y": 0}, "b": {"x": "3", "y": 4}})
    assert [str(e) for e in errors] == ['/b/x: expected integer, got string "3"']


def test_tool_call_converts_json_to_python_types():
    out = distance.invoke({"a": {"x": 0, "y": 0}, "b": {"x": 3, "y": 4}}, RunContext())
    assert out == 5.0
    assert distance(Point(x=0, y=0), Point(x=6, y=8)) == 10.0  # still plain Python


def test_an_async_tool_stays_async_and_errors_name_the_function():
    import inspect

    from pydantic import ValidationError

    from jsonagent.tools.handlers import sync

    @tool
    async def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert inspect.iscoroutinefunction(add.fn)  # what a spec handler's runner checks
    assert sync(add.fn)(a=1, b="2") == 3
    with pytest.raises(ValidationError, match="validation error for distance"):
        distance({"x": 0, "y": 0}, {"x": "three", "y": 4})


def test_tool_sphinx_docstring_and_custom_name():
    @tool(name="when", description="Parse a date.")
    def parse(day: date, ctx: RunContext) -> str:
        """Ignored summary.

        :param day: an ISO date
        """
        return f"{day.isoformat()} at step {ctx.step}"

    assert parse.spec.name == "when" and parse.spec.description == "Parse a date."
    assert "ctx" not in parse.spec.parameters["properties"]
    assert parse.spec.parameters["properties"]["day"]["description"] == "an ISO date"
    assert parse.invoke({"day": "2026-01-02"}, RunContext(step=3)) == "2026-01-02 at step 3"


def test_python_and_json_tools_in_one_toolset(tmp_path):
    (tmp_path / "mytools.py").write_text("def shout(text):\n    return text.upper()\n")
    (tmp_path / "specs.json").write_text(json.dumps([{
        "name": "shout", "description": "Upper-case.", "handler": "mytools:shout",
        "parameters": [{"name": "text", "type": "str"}]}]))
    ts = Toolset.build([tmp_path / "specs.json", distance])
    assert ts.names == ["shout", "distance", "TaskCompleteTool"]  # task-complete always present
    assert ts.get("shout").invoke({"text": "hi"}, RunContext()) == "HI"


def test_duplicate_names_across_sources_are_an_error():
    other = tool(lambda a: a, name="distance", description="Another tool of the same name.")
    with pytest.raises(SpecError, match="duplicate tool name"):
        Toolset.build([distance, other])


def test_the_same_tool_given_twice_counts_once():
    assert Toolset.build([distance, distance]).names == ["distance", "TaskCompleteTool"]


def test_bad_handler_is_a_spec_error(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"name": "x", "handler": "nowhere_mod:fn"}))
    with pytest.raises(SpecError, match=r"s.json\[0\] \(x\): cannot load handler 'nowhere_mod:fn'"):
        Toolset.build(tmp_path / "s.json")


def test_output_type_replaces_task_complete_schema():
    class Answer(BaseModel):
        """The city and its population."""
        city: str
        population: int
        where: Point

    ts = Toolset.build(None, output_type=Answer)
    params = ts.final.spec.parameters
    assert params["required"] == ["city", "population", "where"]
    assert "$ref" not in json.dumps(params)  # inlined, so it nests inside the step schema
    assert params["properties"]["where"]["properties"]["x"] == {"title": "X", "type": "integer"}
    assert "The city and its population." in ts.final.spec.description
    errors = ts.final.spec.validate_args({"city": "Oslo", "population": "7", "where": {"x": 1, "y": 2}})
    assert [e.path for e in errors] == ["/population"]


def test_get_time_zone_and_format():
    out = get_time("Asia/Shanghai", "%Y|%z")
    assert out["now"].endswith("|+0800") and out["timezone"] == "Asia/Shanghai"
    assert get_time()["now"][:4].isdigit()


def test_get_time_reads_what_small_models_write():
    """Seen on the 1.5B model: 'local' for the zone, and a format with no directive, which
    strftime would hand back unchanged as if it were the time."""
    assert get_time("Local")["timezone"] == get_time()["timezone"]
    for bad in ("YYYY", "ISO 8601"):
        with pytest.raises(ToolError, match="no strftime directive.*'%Y'"):
            get_time("UTC", bad)


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../etc/passwd", "Not A Zone"])
def test_get_time_unknown_zone_is_clear(zone):
    with pytest.raises(ToolError, match="unknown time zone.*the areas Africa, America"):
        get_time(zone)


def test_get_time_forgives_case_and_spaces_and_offers_what_was_meant():
    assert get_time("america/new york")["timezone"] == "America/New_York"
    assert get_time("utc")["timezone"] == "UTC"
    for written, meant in [("Europe/Londn", "'Europe/London'"), ("Tokyo", "'Asia/Tokyo'")]:
        with pytest.raises(ToolError, match=f"did you mean {meant}"):
            get_time(written)
    # a city tzdata has no zone for gets its area's names, never another city's look-alike
    # (Asia/Mumbai is as near Asia/Dubai as a typo), nor an example to copy
    with pytest.raises(ToolError) as caught:
        get_time("Asia/Mumbai")
    said = str(caught.value)
    assert "the IANA names in Asia are: Asia/Aden" in said and "Asia/Kolkata" in said
    assert "did you mean" not in said and "\n" not in said
    # an offset name is never offered: Etc/GMT+8 is UTC-8, not the clock 'GMT+8' meant
    for written in ("GMT+8", "UTC+8", "Etc/GMT+08"):
        with pytest.raises(ToolError) as caught:
            get_time(written)
        assert "did you mean" not in str(caught.value)
    assert "Etc/GMT+N is N hours behind UTC" in str(caught.value)


def test_ask_human_without_a_human_needs_one():
    ts = Toolset.build(None)
    out = ts.get("AskHumanHelpTool").invoke({"question": "Which city?"}, RunContext())
    assert out == Pending(kind="question", question="Which city?")
    ask = ts.get("AskHumanHelpTool")
    assert ask.invoke({"question": "Q"}, RunContext(ask_human=lambda q: "Oslo")) == "Oslo"


def test_toolset_find_is_forgiving_only_when_unique():
    ts = Toolset.build(None)
    assert ts.find("get_time_tools").name == "GetTimeTools"
    assert ts.find("nothing") is None


def test_output_type_without_docstring_adds_no_inherited_text():
    """The README's example: a docstring-less pydantic model once pulled BaseModel's 2,000
    characters of documentation into the task-complete tool, doubling the prompt."""
    from dataclasses import dataclass

    from jsonagent import Agent
    from jsonagent.testing import ScriptedModel

    class Answer(BaseModel):
        city: str
        people: int

    @dataclass
    class Pair:
        a: int

    plain = Agent(model=ScriptedModel([]), tools=[core_tools()])
    typed = Agent(model=ScriptedModel([]), tools=[core_tools()], output_type=Answer)
    for output_type in (Answer, Pair):
        final = Toolset.build(None, output_type=output_type).final.spec.description
        assert final.endswith("Its arguments are the final answer: fill in every field.")
    assert "Pydantic" not in typed.system_prompt
    # the typed answer adds its schema and one sentence, nothing more
    assert len(typed.system_prompt) - len(plain.system_prompt) < 300
