"""The CLI's spinner for slow local-model work, and `--no-kv-cache` reaching the backend."""

from __future__ import annotations

import io

from jsonagent.cli.options import RunOptions


def test_a_status_shows_in_the_spinner_and_gives_it_back():
    from rich.console import Console

    from jsonagent.cli.display import Display

    display = Display()
    display.err = Console(file=io.StringIO(), force_terminal=True)
    display.live = True
    display.status("loading model.gguf…")
    assert display._status is not None and display._label is None
    display.status(None)
    assert display._status is None  # nothing was showing before
    display._start("thinking… step 1,")
    display.status("loading the cached system prompt…")
    assert display._label == "thinking… step 1,"
    display.status(None)
    assert display._status is not None and display._label == "thinking… step 1,"
    display._stop()


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
