"""The prompt-prefix cache's files: keys, validation on load, LRU eviction (no model needed)."""

from __future__ import annotations

import logging
import os

from jsonagent.models import catalog
from jsonagent.models.kvcache import PrefixCache, kv_dir, model_identity


def _cache(tmp_path, max_bytes=10_000, identity="sha256:abc", engine="llama-cpp-python 0.3.36"):
    return PrefixCache(tmp_path / "kv", identity, engine, max_bytes)


def _writer(data: bytes):
    def write(path):
        path.write_bytes(data)
        return True
    return write


def test_it_lives_under_the_home(tmp_path, monkeypatch):
    monkeypatch.setenv("JSONAGENT_HOME", str(tmp_path))
    assert kv_dir() == tmp_path / "kv"


def test_the_key_covers_model_engine_and_tokens(tmp_path):
    base = _cache(tmp_path).file([1, 2, 3])
    assert base == _cache(tmp_path).file([1, 2, 3])
    assert base != _cache(tmp_path).file([1, 2, 4])
    assert base != _cache(tmp_path, identity="sha256:other").file([1, 2, 3])
    assert base != _cache(tmp_path, engine="llama-cpp-python 0.3.37").file([1, 2, 3])


def test_a_saved_prefix_loads_when_its_tokens_match(tmp_path):
    cache = _cache(tmp_path)
    cache.save([1, 2, 3], _writer(b"state"))
    assert cache.file([1, 2, 3]).read_bytes() == b"state"
    assert not list(cache.folder.glob(".*partial"))
    assert cache.load([1, 2, 3], lambda path: [1, 2, 3])
    assert not cache.load([9], lambda path: [9])  # never saved


def test_a_corrupt_or_mismatched_file_is_ignored_deleted_and_logged_once(tmp_path, caplog):
    cache = _cache(tmp_path)
    for read in (lambda path: None, lambda path: [7, 7], lambda path: 1 / 0):
        cache.save([1, 2, 3], _writer(b"junk"))
        with caplog.at_level(logging.WARNING, logger="jsonagent.models"):
            assert not cache.load([1, 2, 3], read)
        assert not cache.file([1, 2, 3]).exists()  # the caller rebuilds it
    cache.save([1, 2, 3], _writer(b"junk"))
    with caplog.at_level(logging.WARNING, logger="jsonagent.models"):
        cache.load([1, 2, 3], lambda path: None)
    unreadable = [r for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(unreadable) == 1 and "rebuilt" in unreadable[0].getMessage()


def test_a_failed_write_leaves_nothing(tmp_path):
    cache = _cache(tmp_path)
    cache.save([1], lambda path: False)
    assert not cache.file([1]).exists() and not list(cache.folder.iterdir())


def test_least_recently_used_files_go_first(tmp_path):
    cache = _cache(tmp_path, max_bytes=350)
    for i, tokens in enumerate(([1], [2], [3])):
        cache.save(tokens, _writer(b"x" * 100))
        os.utime(cache.file(tokens), ns=(i * 10**9, i * 10**9))
    assert cache.load([1], lambda path: [1])  # the oldest, now the most recently used
    cache.save([4], _writer(b"x" * 100))
    left = {p.name for p in cache.folder.glob("*.kv")}
    assert left == {cache.file(t).name for t in ([1], [3], [4])}


def test_a_catalog_model_is_known_by_its_pinned_hash_and_others_by_size_and_mtime(tmp_path):
    entry = catalog.CATALOG["smollm2-135m"]
    pinned = tmp_path / entry.filename
    with pinned.open("wb") as f:
        f.truncate(entry.size)  # sparse: the size is what is checked, never the content
    assert model_identity(pinned) == f"sha256:{entry.sha256}"
    other = tmp_path / "mine.gguf"
    other.write_bytes(b"GGUF")
    first = model_identity(other)
    assert first.startswith("file:") and first.endswith(f":4:{other.stat().st_mtime_ns}")
    os.utime(other, ns=(1, 1))
    assert model_identity(other) != first
