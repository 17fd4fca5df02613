"""The `local` backend: a GGUF model run in-process by llama.cpp (extra `jsonagent[local]`).

The model is loaded once. Each call formats the messages with the model's own chat template
and decodes under a grammar built from the response_format, so that in `schema` mode every
reply is a valid step by construction. llama.cpp keeps the previous call's tokens in its KV
cache and re-evaluates only what follows the longest common prefix; because the system prompt
and the history stay byte-identical from step to step, that is nearly the whole prompt.
`Usage.cached_tokens` reports how many prompt tokens were reused that way.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from jsonagent.errors import ConfigError, ModelError, ResponseFormatRejected
from jsonagent.models import Message, ModelReply, Usage
from jsonagent.models import catalog

INSTALL_HINT = (
    "the local backend needs llama-cpp-python: install jsonagent[local] "
    '(build it portably with CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON '
    '-DGGML_FMA=ON -DGGML_F16C=ON")'
)


class LocalConfig(BaseModel):
    """How llama.cpp loads and samples; the defaults suit an agent on a small CPU."""

    n_ctx: int = 8192
    """Context window in tokens: the system prompt plus the whole run's history must fit."""
    n_threads: int | None = None
    """CPU threads; None uses every core."""
    temperature: float = 0.0
    """0 picks the most likely token every time, which makes runs repeatable."""
    max_tokens: int = 1024
    """Cap on the tokens of one reply."""
    seed: int = 0
    """Sampling seed, used when temperature is above 0."""
    verbose: bool = False
    """Let llama.cpp print its own logs to stderr."""


class LocalModel:
    """A GGUF file loaded by llama-cpp-python; implements the `Model` protocol."""

    default_json_mode = "schema"
    """Grammar-constrained decoding is what this backend is for."""

    def __init__(self, path: str | os.PathLike[str], config: LocalConfig | None = None):
        self.path = Path(path).expanduser()
        self.config = config or LocalConfig()
        self.name = f"local:{self.path.name}"
        if not self.path.is_file():
            raise ConfigError(f"model file not found: {self.path}")
        try:
            import llama_cpp
        except ImportError:
            raise ConfigError(INSTALL_HINT) from None
        self._llama_cpp = llama_cpp
        threads = self.config.n_threads or os.cpu_count() or 1
        try:
            self._llm = llama_cpp.Llama(
                model_path=str(self.path),
                n_ctx=self.config.n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                seed=self.config.seed,
                verbose=self.config.verbose,
            )
        except (ValueError, RuntimeError) as exc:
            raise ConfigError(f"llama.cpp could not load {self.path}: {exc}") from None
        self._grammars: dict[str, Any] = {}
        self._lock = threading.Lock()  # one llama.cpp context: concurrent runs take turns

    @classmethod
    def from_spec(cls, spec: str | None, config: LocalConfig | None = None) -> "LocalModel":
        """`--model local[:SPEC]`: SPEC is a .gguf path or a catalog name.

        With no SPEC, `JSONAGENT_LOCAL_MODEL` is used when set, else the catalog's default
        model, which must have been pulled first.
        """
        spec = spec or os.environ.get("JSONAGENT_LOCAL_MODEL") or catalog.DEFAULT_LOCAL_MODEL
        if spec in catalog.CATALOG:
            return cls(catalog.path(spec), config)
        if not spec.endswith(".gguf") and not Path(spec).expanduser().exists():
            known = ", ".join(catalog.CATALOG)
            raise ConfigError(f"--model local:{spec}: not a .gguf file nor a known model ({known})")
        return cls(spec, config)

    def complete(self, messages: list[Message], response_format: dict | None) -> ModelReply:
        grammar = self._grammar(response_format)
        with self._lock:
            before = self._cached_ids()
            try:
                out = self._llm.create_chat_completion(
                    messages=messages,
                    grammar=grammar,
                    temperature=self.config.temperature,
                    max_tokens=self.config.max_tokens,
                    seed=self.config.seed,
                )
            except ValueError as exc:  # e.g. the prompt no longer fits in n_ctx
                raise ModelError(f"{self.name}: {exc}") from None
            usage = out.get("usage") or {}
            prompt_tokens = int(usage.get("prompt_tokens", 0))
            prompt_ids = self._cached_ids()[:prompt_tokens]
        return ModelReply(
            text=out["choices"][0]["message"]["content"] or "",
            usage=Usage(
                prompt_tokens=prompt_tokens,
                completion_tokens=int(usage.get("completion_tokens", 0)),
                cached_tokens=_reused_prefix(before, prompt_ids),
            ),
        )

    @property
    def context_tokens(self) -> int:
        """The context window (`n_ctx`): prompt and reply together."""
        return self.config.n_ctx

    def count_tokens(self, messages: list[Message]) -> int:
        """The exact prompt tokens of a request: the chat template llama.cpp itself applies,
        then its tokenizer."""
        if not hasattr(self, "_formatter"):
            self._formatter = _chat_formatter(self._llm)
        result = self._formatter(messages=messages)
        return len(self._llm.tokenize(result.prompt.encode("utf-8"),
                                      add_bos=not result.added_special, special=True))

    def close(self) -> None:
        """Free the model now rather than at garbage collection."""
        self._llm.close()

    def _cached_ids(self) -> list[int]:
        """The tokens whose keys and values sit in the KV cache right now."""
        return self._llm.input_ids[: self._llm.n_tokens].tolist()

    def _grammar(self, response_format: dict | None) -> Any:
        kind = (response_format or {}).get("type", "text")
        if kind == "text":
            return None
        if kind == "json_object" and "schema" not in response_format:
            return self._compiled("json", lambda g: g.from_string(self._llama_cpp.llama_grammar.JSON_GBNF))
        if kind == "json_schema":
            schema = (response_format.get("json_schema") or {}).get("schema")
        else:
            schema = response_format.get("schema")
        if kind not in ("json_schema", "json_object") or not isinstance(schema, dict):
            raise ResponseFormatRejected(f"{self.name}: unsupported response_format {kind!r}")
        text = json.dumps(schema)  # property order matters: the grammar keeps it
        return self._compiled(text, lambda g: g.from_json_schema(text, verbose=self.config.verbose))

    def _compiled(self, key: str, build) -> Any:
        if key not in self._grammars:
            try:
                self._grammars[key] = build(self._llama_cpp.LlamaGrammar)
            except Exception as exc:  # the converter raises bare errors on schemas it cannot express
                raise ResponseFormatRejected(f"{self.name}: cannot turn the schema into a grammar: {exc}") from None
        return self._grammars[key]


def _chat_formatter(llm: Any) -> Any:
    """The formatter behind the chat handler `create_chat_completion` uses. llama-cpp-python
    keeps it only inside the handler's closure, so it is read from there."""
    import inspect

    from llama_cpp import llama_chat_format

    handler = llm.chat_handler or llm._chat_handlers.get(llm.chat_format) \
        or llama_chat_format.get_chat_completion_handler(llm.chat_format)
    formatter = inspect.getclosurevars(handler).nonlocals.get("chat_formatter")
    if formatter is None:
        raise ModelError(f"cannot count tokens for chat format {llm.chat_format!r}")
    return formatter


def _reused_prefix(before: list[int], prompt: list[int]) -> int:
    """Prompt tokens llama.cpp did not evaluate again: the common prefix with the KV cache.

    It always decodes at least the prompt's last token, so a full match counts one less.
    """
    shared = 0
    for old, new in zip(before, prompt):
        if old != new:
            break
        shared += 1
    return min(shared, max(len(prompt) - 1, 0))
