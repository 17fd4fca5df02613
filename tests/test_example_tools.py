"""The example tools in tool_specs/examples/, run as specs. The HTTP ones go to real servers
on 127.0.0.1 that stand in for OpenWeather, Tavily and Wikipedia."""

import json
import time

import pytest

from jsonagent import RunContext, SpecError, ToolError, Toolset, bundled
from http_fakes import FakeAPI

EXAMPLES = bundled.path("tool_specs", "examples")


def load(name: str, tmp_path=None, host: str | None = None, real: str | None = None):
    """The example's Tool; with `host`, its remote URL points at a local stand-in instead."""
    path = EXAMPLES / name
    if host:
        spec = json.loads(path.read_text())
        spec["handler"]["http"]["url"] = spec["handler"]["http"]["url"].replace(real, host)
        path = tmp_path / name
        path.write_text(json.dumps(spec))
    [t] = [t for t in Toolset.build([path]) if not t.final]
    return t


def call(t, **args):
    assert not t.spec.validate_args(args), t.spec.validate_args(args)
    return t.invoke(args, RunContext())


def test_calculator():
    calc = load("calculator.json")
    assert call(calc, expression="(3 + 4) * 2 ** 10")["result"] == 7168
    assert call(calc, expression="2^10 - sqrt(16)")["result"] == 1020
    assert call(calc, expression="10 / 4")["result"] == 2.5
    with pytest.raises(ToolError, match="division by zero"):
        call(calc, expression="1 / 0")


@pytest.mark.parametrize("expression, message", [
    ("__import__('os').system('echo hi')", "not allowed in a calculation"),
    ("().__class__", "not allowed in a calculation"),
    ("open('/etc/passwd')", "not allowed in a calculation"),
    ("2 +", "not arithmetic"),
])
def test_calculator_refuses_what_is_not_arithmetic(expression, message):
    with pytest.raises(ToolError, match=message):
        call(load("calculator.json"), expression=expression)


def test_calculator_refuses_work_too_large_to_finish():
    calc = load("calculator.json")
    t0 = time.monotonic()
    for expression in ("9**9**9", "10**100000", "(10**1000) * (10**1000) * (10**1000)"):
        with pytest.raises(ToolError, match="digits; the calculator stops at"):
            call(calc, expression=expression)
    assert time.monotonic() - t0 < 1
    assert call(calc, expression="2**64")["result"] == 18446744073709551616


def test_weather(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENWEATHER_API_KEY", "ow-key")
    answer = {"weather": [{"description": "light rain"}], "main": {"temp": 11.2}}
    with FakeAPI({"/data/2.5/weather": lambda r: (200, answer)}) as api:
        t = load("weather.json", tmp_path, api.url, "https://api.openweathermap.org")
        assert call(t, city="Paris,FR") == answer
    req = api.requests[0]
    assert req.query == {"q": "Paris,FR", "units": "metric", "appid": "ow-key"}


def test_weather_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENWEATHER_API_KEY", raising=False)
    with pytest.raises(SpecError, match="environment variable OPENWEATHER_API_KEY is not set"):
        load("weather.json")
    monkeypatch.setenv("OPENWEATHER_API_KEY", "wrong")
    with FakeAPI({"/": lambda r: (401, {"cod": 401, "message": "Invalid API key"})}) as api:
        t = load("weather.json", tmp_path, api.url, "https://api.openweathermap.org")
        with pytest.raises(ToolError, match=r'^HTTP 401 Unauthorized from GET .*/data/2.5/weather: '
                                            r'\{"cod": 401, "message": "Invalid API key"\}$'):
            call(t, city="Nowhere")


def test_web_search(tmp_path, monkeypatch):
    monkeypatch.setenv("TAVILY_API_KEY", "tv-key")
    answer = {"answer": "42", "results": [{"title": "t", "url": "u", "content": "c"}]}
    with FakeAPI({"/search": lambda r: (200, answer)}) as api:
        t = load("web_search.json", tmp_path, api.url, "https://api.tavily.com")
        assert call(t, query="meaning of life", max_results=3) == answer
    req = api.requests[0]
    assert req.method == "POST" and req.headers["authorization"] == "Bearer tv-key"
    assert req.body == {"query": "meaning of life", "max_results": 3, "include_answer": True,
                        "search_depth": "basic"}


def test_wikipedia_summary(tmp_path):
    answer = {"title": "AC/DC", "extract": "AC/DC are an Australian rock band."}
    with FakeAPI({"/api/rest_v1/page/summary/": lambda r: (200, answer)}) as api:
        t = load("wikipedia.json", tmp_path, api.url, "https://en.wikipedia.org")
        assert call(t, title="AC/DC") == answer
    assert api.requests[0].path == "/api/rest_v1/page/summary/AC%2FDC"  # one segment


def test_read_file_is_confined_to_its_root(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_text("hello")
    (tmp_path / "secret.txt").write_text("keep out")
    (root / "link").symlink_to(tmp_path / "secret.txt")
    monkeypatch.setenv("JSONAGENT_FILES_ROOT", str(root))
    t = load("read_file.json")
    assert call(t, path="docs/a.txt") == {"path": "docs/a.txt", "text": "hello"}
    assert call(t, path=".")["directory"] == ["docs/", "link"]
    assert call(t, path="docs/a.txt", max_chars=2)["truncated"] == "showing 2 of 5 characters"
    for escape in ("../secret.txt", str(tmp_path / "secret.txt"), "link", "docs/../../secret.txt"):
        with pytest.raises(ToolError, match="is outside the readable root"):
            call(t, path=escape)
    with pytest.raises(ToolError, match="no file 'nope.txt' under the root"):
        call(t, path="nope.txt")
