"""The documentation site builds with `mkdocs build --strict`, a broken link fails it, and the
built site works in a real headless Chromium (Debian's, driven by Playwright): the home
page, the search, and an API reference page.

Set JSONAGENT_DOCS_SHOTS=DIR to keep the screenshots (bench/results/docs/ has the ones the
closing note of the docs issue shows).
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

if not os.environ.get("CI"):  # CI installs the docs extra: there, a missing one must fail
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("material", reason="the docs extra: pip install -e '.[docs]'")

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
SECTIONS = ["Home", "Get started", "Tutorials", "How-to guides", "Concepts", "Reference",
            "Benchmarks", "Changelog"]


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(site)], capture_output=True, text=True, timeout=170,
                          env=env, cwd=config.parent)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once for this module's tests."""
    out = tmp_path_factory.mktemp("site") / "site"
    done = build(ROOT / "mkdocs.yml", out)
    assert done.returncode == 0, done.stderr[-4000:]
    return out, done.stderr


def test_the_strict_build_passes_with_every_section_and_llms_txt(site):
    out, log = site
    counts = dict(part.rsplit(" ", 1) for part in
                  log.split("pages per section: ", 1)[1].splitlines()[0].split(", "))
    print("pages per section:", counts)
    assert list(counts) == SECTIONS and all(int(n) >= 1 for n in counts.values())
    assert "WARNING" not in log
    llms = (out / "llms.txt").read_text()
    assert "## Tutorials" in llms and "how-to/sessions" in llms
    full = (out / "llms-full.txt").read_text()
    assert "AskHumanHelpTool" in full and len(full) > 100_000  # the pages' text, not their links
    assert (out / "reference" / "cli" / "index.html").read_text().count("jsonagent eval compare") >= 1


def test_a_broken_link_in_a_copy_fails_the_strict_build(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    for path in ROOT.iterdir():  # the rest of the checkout, as it is
        if path.name not in ("docs", "mkdocs.yml", ".git", ".venv"):
            (copy / path.name).symlink_to(path)
    page = copy / "docs" / "how-to" / "cancelling.md"
    page.write_text(page.read_text() + "\nSee [the lost page](no-such-page.md).\n")
    done = build(copy / "mkdocs.yml", tmp_path / "site")
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "no-such-page.md" in said and "Aborted with 1 warnings in strict mode" in said, said[-3000:]


@pytest.fixture(scope="module")
def served(site):
    out, _ = site
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package")
def test_the_site_in_chromium_home_search_and_reference(served, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    shots = Path(os.environ.get("JSONAGENT_DOCS_SHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox"], timeout=30_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            outside = []  # the site must work offline: nothing is fetched from elsewhere
            page.on("request", lambda r: r.url.startswith(served) or outside.append(r.url))
            page.set_default_timeout(20_000)
            page.goto(served + "/")
            assert page.inner_text("article h1").rstrip("¶") == "jsonagent"
            assert "Two commands" in page.inner_text("article")
            page.screenshot(path=str(shots / "home.png"))

            page.click("input.md-search__input")  # in the header, at this width
            page.keyboard.type("approval", delay=30)  # (the search listens to keys, not fill)
            page.wait_for_selector(".md-search-result__item")
            found = page.inner_text(".md-search-result")
            assert "Sessions, resume and approvals" in found, found

            page.goto(served + "/tutorials/embedding/")
            assert page.inner_text("article h1").rstrip("¶") == "Embedding an agent"
            page.screenshot(path=str(shots / "tutorial.png"))

            page.goto(served + "/reference/python/")
            agent = page.locator("[id='jsonagent.agent.Agent']")
            assert agent.count() == 1 and "jsonagent.Agent" in agent.inner_text()
            assert page.locator("[id='jsonagent.agent.Agent.run']").count() == 1
            page.goto(served + "/reference/cli/")
            assert "jsonagent run [OPTIONS] QUESTION" in page.inner_text("article")
            page.screenshot(path=str(shots / "reference.png"))
            assert not outside, outside
        finally:
            browser.close()
    assert all((shots / f"{name}.png").stat().st_size > 10_000 for name in ("home", "tutorial", "reference"))
