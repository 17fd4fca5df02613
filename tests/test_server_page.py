"""The page at /, in a real headless Chromium (Debian's, at /usr/bin/chromium) driven by
Playwright: a question typed, a thought seen live, the agent's question answered, the final
answer shown, and no model or tool text ever run as HTML."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from test_server import ASK, serve  # noqa: F401  (the fixture)
from jsonagent.testing import step

CHROMIUM = Path("/usr/bin/chromium")
sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package")

HOSTILE = '<img src=x onerror="window.pwned=3"><script>window.pwned=4</script>'


def test_page_runs_answers_and_escapes_everything(serve, tmp_path):
    server = serve([step("evil", {}, "<b>thinking</b> about it"), ASK,
                    step("TaskCompleteTool", {"output": f"Oslo it is {HOSTILE}"}, "done")],
                   token="page-token")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox"], timeout=30_000)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 860})
            page.set_default_timeout(15_000)
            page.goto(server.url + "/")
            page.fill("#token", "page-token")  # asked once, kept in session storage
            page.click("#login-form button")
            page.fill("#input", "What is the weather?")
            page.fill("#session", "browser")
            page.click("#ask button")
            page.wait_for_selector("#steps li .thought")
            assert page.inner_text("#steps li .thought") == "<b>thinking</b> about it"
            page.wait_for_selector("#respond:not([hidden])")
            assert page.inner_text("#pending") == "Which city?"
            obs = page.inner_text("#steps li .observation")
            assert "<script>window.pwned=2</script>" in obs
            page.fill("#answer", "Oslo")
            page.click("#send-answer")
            page.wait_for_selector("#final:not([hidden])")
            page.wait_for_function(
                "document.getElementById('answer-text').textContent.includes('Oslo it is')")
            assert HOSTILE in page.inner_text("#answer-text")
            page.wait_for_function(
                "document.getElementById('run-status').textContent == 'completed'")
            page.wait_for_selector("#runs li")
            assert "What is the weather?" in page.inner_text("#runs")
            assert "browser" in page.inner_text("#sessions")
            assert page.evaluate("window.pwned") is None
            assert page.evaluate("sessionStorage.getItem('jsonagent-token')") == "page-token"
            shot = Path(os.environ.get("JSONAGENT_SCREENSHOT", tmp_path / "page.png"))
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
        finally:
            browser.close()


def test_past_runs_follow_a_run_that_ends_elsewhere(serve):
    """A run answered through the API, not on the page, still shows its end in the list."""
    server = serve([ASK, step("TaskCompleteTool", {"output": "42"}, "done")])
    run = server.create(input="Which city?")
    server.wait(run["id"], "requires_action")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox"], timeout=30_000)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            page.goto(server.url + "/")
            shows(page, "#runs", "requires_action")
            with server.client as c:
                assert c.post(f"/v1/runs/{run['id']}/respond",
                              json={"answer": "Oslo"}).status_code == 202
            server.wait(run["id"], "completed")
            shows(page, "#runs", "completed ·")
            assert "requires_action" not in page.inner_text("#runs")
        finally:
            browser.close()


def shows(page, selector: str, text: str, timeout: float = 15) -> None:
    """Wait until the element's text holds `text` (polled from here: the page's CSP
    forbids the eval that Playwright's own polling uses)."""
    import time

    deadline = time.monotonic() + timeout
    while text not in page.inner_text(selector):
        assert time.monotonic() < deadline, page.inner_text(selector)
        time.sleep(0.1)


def test_the_thought_is_typed_into_the_step_before_it_ends(serve):
    from test_server_stream import LONG, SLOW

    with _asked(serve(SLOW), "What time is it?") as page:
        seen = _typing(page, '#steps li[data-step="2"]')
        assert seen and LONG.startswith(seen) and seen != LONG  # part of it, as written
        shows(page, "#run-status", "completed")
        assert page.inner_text('#steps li[data-step="2"] .thought') == LONG
        assert page.evaluate("document.querySelectorAll('#steps li.writing').length") == 0


@contextmanager
def _asked(server, question: str):
    """The page in Chromium, with `question` just asked."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox"], timeout=30_000)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            page.goto(server.url + "/")
            page.fill("#input", question)
            page.click("#ask button")
            yield page
        finally:
            browser.close()


def _typing(page, item: str, timeout: float = 20) -> str:
    """The thought of a step being written, once some of it is there."""
    import time

    deadline = time.monotonic() + timeout
    script = ("(item) => { const li = document.querySelector(item);"
              " return li && li.classList.contains('writing') ?"
              " li.querySelector('.thought').textContent : ''; }")
    while time.monotonic() < deadline:
        text = page.evaluate(script, item)
        if len(text) >= 6:
            return text
        time.sleep(0.05)
    raise AssertionError(f"no thought typed into {item}: {page.inner_text('#steps')}")


def test_the_first_steps_thought_is_typed_too(serve):
    """The page's run streams from its first model call (it posts with stream: true), so
    the first step, the longest wait, is typed as it is written."""
    from test_server_stream import LONG

    # about 3.5 s of typing: a loaded machine's browser may first look a second late
    server = serve({"chunk": 3, "delay": 0.15,
                    "replies": [step("GetTimeTools", {"timezone": "UTC"}, LONG),
                                step("TaskCompleteTool", {"output": "42"}, "done")]})
    with _asked(server, "What time is it?") as page:
        seen = _typing(page, '#steps li[data-step="1"]')
        assert seen and LONG.startswith(seen) and seen != LONG  # part of it, as written
        shows(page, "#run-status", "completed")
        assert page.inner_text('#steps li[data-step="1"] .thought') == LONG
