"""Prefill for the local backend: bringing llama.cpp's KV cache to a prompt, evaluating as little
of it as possible.

- What the cache already holds is kept up to the longest common prefix with the new prompt; the
  history stays byte-identical from step to step, so that is nearly the whole prompt.
- The system prompt is evaluated as a batch of its own and its KV state saved to disk
  (`kvcache.py`), so a fresh process loads it instead of evaluating it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from jsonagent.models import Message

if TYPE_CHECKING:
    from pathlib import Path

    from .kvcache import PrefixCache

OnStatus = Callable[[str | None], None]
"""Told what slow thing is happening now (loading the model, the cached prompt); None when done."""

MIN_CACHED_PREFIX = 32
"""A system prompt shorter than this (in tokens) is cheaper to evaluate than to load."""


class Prefill:
    """The prompt side of one llama.cpp context: what its KV cache holds, and the disk cache."""

    def __init__(self, llm: Any, on_status: OnStatus, kv: PrefixCache | None):
        self._llm = llm
        self._status = on_status
        self._kv = kv
        self._prefixes: dict[str, int] = {}

    def evaluate(self, tokens: list[int], prefix: int, last: bool = True) -> int:
        """Bring the KV cache to `tokens` (all but the last one unless `last`); return how many were reused.

        The first `prefix` tokens (the system prompt) are always evaluated as a batch of their
        own, with the disk cache on or off, so that both give the same numbers.
        """
        llm = self._llm
        end = len(tokens) if last else len(tokens) - 1
        reused = _reused_prefix(llm.input_ids[: llm.n_tokens].tolist(), tokens)
        if reused < prefix:
            if self._kv is not None and prefix >= MIN_CACHED_PREFIX and self._load_prefix(tokens[:prefix]):
                reused = prefix
            else:
                self._status(f"evaluating the system prompt ({prefix} tokens)…")
                try:
                    llm.n_tokens = reused
                    llm.eval(tokens[reused:prefix])
                finally:
                    self._status(None)
                if self._kv is not None and prefix >= MIN_CACHED_PREFIX:
                    from .kvcache import seq_writer

                    self._kv.save(tokens[:prefix], seq_writer(llm.ctx, tokens[:prefix]))
        start = max(reused, prefix)
        llm.n_tokens = start
        if end > start:
            llm.eval(tokens[start:end])
        else:
            llm._ctx.kv_cache_seq_rm(-1, start, -1)
        return reused

    def _load_prefix(self, prefix: list[int]) -> bool:
        from .kvcache import seq_reader

        llm = self._llm
        path = self._kv.file(prefix)
        if not path.is_file():
            return False
        self._status(f"loading the cached system prompt ({len(prefix)} tokens)…")
        try:
            llm.n_tokens = 0
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)
            if self._kv.load(prefix, seq_reader(llm.ctx, len(prefix))):
                llm.input_ids[: len(prefix)] = prefix
                llm.n_tokens = len(prefix)
                return True
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)  # whatever a bad file left behind
            return False
        finally:
            self._status(None)

    def prefix_length(self, messages: list[Message], prompt: str, tokens: list[int]) -> int:
        """How many of `tokens` hold the chat template's opening and the system message."""
        if not messages or messages[0].get("role") != "system":
            return 0
        content = messages[0].get("content") or ""
        if content not in self._prefixes:
            at = prompt.find(content)
            if at < 0 or not content:
                return 0
            head = self._llm.tokenize(prompt[: at + len(content)].encode("utf-8"), add_bos=False, special=True)
            self._prefixes[content] = _common_prefix(head, tokens)
        return min(self._prefixes[content], len(tokens) - 1)


def prefix_cache(model_path: Path, engine: str, max_bytes: int) -> PrefixCache:
    """The system prompts' KV states on disk, for this model file under this llama.cpp build."""
    from .kvcache import PrefixCache, kv_dir, model_identity

    return PrefixCache(kv_dir(), model_identity(model_path), engine, max_bytes)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    shared = 0
    for old, new in zip(a, b):
        if old != new:
            break
        shared += 1
    return shared


def _reused_prefix(before: Sequence[int], prompt: Sequence[int]) -> int:
    """Prompt tokens that need no evaluation: the common prefix with the KV cache.

    The prompt's last token is always evaluated, for its logits, so a full match counts one less.
    """
    return min(_common_prefix(before, prompt), max(len(prompt) - 1, 0))
