"""The partial reader, on replies cut at every byte: each prefix yields only true deltas, and
the thought deltas add up to the thought the envelope reads from the whole reply."""

import codecs
import json

import pytest

from jsonagent.envelope import parse_reply
from jsonagent.partial import JsonReader, ReactReader, reader_for
from jsonagent.tools.toolset import Toolset

TOOLS = Toolset.build(None)


def Utf8Pieces():
    """Bytes in, whole characters out, as a backend hands on a reply cut inside a character."""
    return codecs.getincrementaldecoder("utf-8")().decode

JSON_REPLIES = [
    {"thought": "plain words", "tool_name": "GetTimeTools", "args_list": {}},
    {"thought": 'quotes " and \\ backslashes, a tab\t, a newline\nand a slash /',
     "tool_name": "CodeInterpreterTool", "args_list": {"code": "print(\"}{\")\n"}},
    {"thought": "héllo wörld, 日本語, an emoji 🙂 and 𝄞", "tool_name": "TaskCompleteTool",
     "args_list": {"output": "ok ✓"}},
]


def _texts():
    out = []
    for reply in JSON_REPLIES:
        out.append(json.dumps(reply))                       # \uXXXX escapes, surrogate pairs
        out.append(json.dumps(reply, ensure_ascii=False))   # multi-byte UTF-8
    # the thought not the first key, spaces around the colons
    out.append('{"tool_name" : "GetTimeTools", "args_list": {"a": [1, {"b": "}"}]}, '
               '"thought" :  "last of three"}')
    out.append('{"args_list": 12, "thought": "\\ud83d\\ude42 escaped emoji \\u00e9", '
               '"tool_name": "TaskCompleteTool"}')
    return out


def _check(text: str, feed_bytes) -> None:
    expected = json.loads(text)
    reader, pieces = JsonReader(), Utf8Pieces()
    thought, tools, args = "", [], ""
    for piece in feed_bytes(text.encode("utf-8")):
        for kind, value in reader.feed(pieces(piece)):
            if kind == "thought":
                thought += value
                assert expected["thought"].startswith(thought), (text, thought)
            elif kind == "tool":
                tools.append(value)
            else:
                args += value
                assert json.dumps(expected["args_list"], ensure_ascii=False).replace(" ", "") \
                    .startswith(args.replace(" ", "")) or text.find(args) >= 0
    assert thought == expected["thought"]
    assert tools == [expected["tool_name"]]
    assert json.loads(args) == expected["args_list"]


@pytest.mark.parametrize("text", _texts())
def test_json_byte_by_byte(text):
    _check(text, lambda data: [data[i:i + 1] for i in range(len(data))])


@pytest.mark.parametrize("text", _texts())
def test_json_cut_at_every_byte(text):
    data = text.encode("utf-8")
    for cut in range(len(data) + 1):
        _check(text, lambda d, c=cut: [d[:c], d[c:]])


def test_json_thought_matches_the_envelope():
    for text in _texts():
        parsed = parse_reply(text, TOOLS)
        if hasattr(parsed, "step"):
            reader = reader_for()
            got = "".join(v for c in text for k, v in reader.feed(c) if k == "thought")
            assert got == parsed.step.thought


def test_a_thought_that_is_not_a_string_yields_nothing():
    reader = JsonReader()
    assert [d for c in '{"thought": null, "tool_name": "x", "args_list": {}}' for d in reader.feed(c)] \
        == [("tool", "x"), ("args", "{"), ("args", "}")]


REACT_REPLIES = [
    "Thought: I need the time in Tokyo.\nAction: GetTimeTools\nAction Input: {}",
    "Thought: first line\nsecond line of the thought\nAction: TaskCompleteTool\n"
    "Action Input: {\"output\": \"x\"}",
    "Thought:  spaced out  \n\nAction: GetTimeTools\nAction Input: {}\nObservation: made up",
    "Thought: I know it now. Final Answer: 42",
    "Thought: é日本🙂 unicode\nFinal Answer: done",
    "Thought: Actions speak; the answer comes.\nFinal Answer: yes",
]


@pytest.mark.parametrize("text", REACT_REPLIES)
def test_react_cut_at_every_byte(text):
    parsed = parse_reply(text, TOOLS)
    final = parsed.step.thought
    data = text.encode("utf-8")
    for cut in range(len(data) + 1):
        reader, pieces, thought = reader_for(), Utf8Pieces(), ""
        for part in (data[:cut], data[cut:]):
            for kind, value in reader.feed(pieces(part)):
                assert kind == "thought"
                thought += value
                assert final.startswith(thought), (cut, thought)
        assert thought == final


@pytest.mark.parametrize("text", REACT_REPLIES)
def test_react_byte_by_byte(text):
    final = parse_reply(text, TOOLS).step.thought
    reader, pieces, thought = ReactReader(), Utf8Pieces(), ""
    data = text.encode("utf-8")
    for i in range(len(data)):
        for _, value in reader.feed(pieces(data[i:i + 1])):
            thought += value
            assert final.startswith(thought)
    assert thought == final


def test_deltas_come_before_the_reply_ends():
    reader = reader_for()
    assert reader.feed('{"thought": "Hel') == [("thought", "Hel")]
    assert reader.feed('lo", "tool_na') == [("thought", "lo")]
    assert reader.feed('me": "GetTimeTools", ') == [("tool", "GetTimeTools")]
    assert reader.feed('"args_list": {"a"') == [("args", '{"a"')]
