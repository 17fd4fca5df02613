"""Screenshot the newest jsonagent trace in a running Arize Phoenix (see NOTES.md), with the
system's Chromium: python screenshot.py [OUT.png] [PHOENIX_URL]"""

import json
import sys
import urllib.request

from playwright.sync_api import sync_playwright

out = sys.argv[1] if len(sys.argv) > 1 else "phoenix.png"
base = sys.argv[2] if len(sys.argv) > 2 else "http://127.0.0.1:6006"


def get(path: str) -> dict:
    with urllib.request.urlopen(base + path, timeout=10) as reply:
        return json.load(reply)


project = get("/v1/projects")["data"][0]
spans = get(f"/v1/projects/{project['name']}/spans?limit=100")["data"]
runs = sorted((s for s in spans if s["name"].startswith("invoke_agent")), key=lambda s: s["start_time"])
trace = runs[-1]["context"]["trace_id"]
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    page = browser.new_page(viewport={"width": 1500, "height": 900})
    page.goto(f"{base}/projects/{project['id']}/traces/{trace}", wait_until="networkidle")
    page.wait_for_timeout(3000)  # the span tree renders after the data arrives
    page.screenshot(path=out)
    browser.close()
print(f"{out}: trace {trace}")
