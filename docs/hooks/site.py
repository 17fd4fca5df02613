"""The mkdocs hook that keeps the site one with the repository.

- The home page is the README: `docs/index.md` is only a stand-in, so the front page has one
  home. Its links into `docs/` are made relative to the site.
- A page may hold `<!-- generated: NAME -->`; the hook puts there what `reference.NAME()`
  renders from the code at build time (the CLI from the typer app, the HTTP API from the
  server's OpenAPI, ...), so a reference page cannot drift from what it describes.
- `bench/results/` is mounted at `/bench/results/` (its charts and transcripts), so the
  benchmark pages show the files the benchmarks wrote instead of copies of them.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(HERE), str(ROOT)]  # reference.py beside this file; jsonagent from the checkout

import reference  # noqa: E402

MARKER = re.compile(r"<!-- generated: ([a-z_]+) -->")
MOUNTED = ("*.png", "*.txt")


def on_files(files, config):
    results = ROOT / "bench" / "results"
    for pattern in MOUNTED:
        for path in sorted(results.rglob(pattern)):
            if "transcripts" in path.parts:  # (ignored by git; a local run's leftovers)
                continue
            files.append(File(str(path.relative_to(ROOT)), str(ROOT), config["site_dir"],
                              config["use_directory_urls"]))
    return files


def on_nav(nav, config, files):
    """Say how many pages each section has, on every build (`mkdocs build` prints it)."""
    logging.getLogger("mkdocs.hooks.site").info("pages per section: %s", ", ".join(
        f"{title} {n}" for title, n in pages_per_section(nav)))
    return nav


def pages_per_section(nav) -> list[tuple[str, int]]:
    def count(item) -> int:
        return 1 if item.is_page else sum(count(child) for child in item.children)
    return [(item.title, count(item)) for item in nav.items]


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "index.md":
        markdown = front_page()
    return MARKER.sub(lambda m: _generated(m.group(1), page.file.src_uri), markdown)


def front_page() -> str:
    """The README, its links made relative to the site's root: `docs/x.md` is `x.md` there."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", text)


def _generated(name: str, where: str) -> str:
    render = getattr(reference, name, None)
    if render is None or name.startswith("_"):
        raise ValueError(f"{where}: no generated section named {name!r} in docs/hooks/reference.py")
    return render()
