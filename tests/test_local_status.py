"""The CLI's status line for slow local-model work, and `--no-kv-cache` reaching the backend."""

from __future__ import annotations

import io

from jsonagent.cli.options import RunOptions
from jsonagent.cli.status import terminal_status


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_status_line_is_drawn_in_place_and_erased_on_a_terminal_only():
    assert terminal_status(io.StringIO()) is None
    term = Terminal()
    show = terminal_status(term)
    show("loading model…")
    show(None)
    assert term.getvalue() == "\r\x1b[Kloading model…\r\x1b[K"


def test_no_kv_cache_goes_to_the_local_backend(monkeypatch):
    seen = {}

    def fake_from_spec(spec, config=None, on_status=None):
        seen.update(spec=spec, kv_cache=config.kv_cache)
        raise SystemExit  # stop before a model file is needed

    from jsonagent.models import local

    monkeypatch.setattr(local.LocalModel, "from_spec", staticmethod(fake_from_spec))
    for flag in (True, False):
        try:
            RunOptions(model="local:x.gguf", no_kv_cache=flag).build_agent()
        except SystemExit:
            pass
        assert seen == {"spec": "x.gguf", "kv_cache": not flag}
