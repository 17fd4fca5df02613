"""The `local` backend: a GGUF model run in-process by llama.cpp (extra `jsonagent[local]`).

The model is loaded once. Each call formats the messages with the model's own chat template
and runs our own sampling loop on llama.cpp's logits:
- A response format is enforced by llguidance (`decoding.py`): the model's pick is checked
  against the grammar and the full mask is computed only when it is refused; forced text is
  evaluated as one batch. In `schema` mode every reply is a valid step by construction. Where
  llguidance is unavailable, llama.cpp's own grammar (slower) is used, and a warning says so once.
- The system prompt is evaluated as its own batch and its KV state is saved under
  `$JSONAGENT_HOME/kv/` (`kvcache.py`), so a fresh process loads it instead of evaluating it.
- Later calls re-evaluate only what follows the longest common prefix with the KV cache; the
  history stays byte-identical from step to step, so that is nearly the whole prompt.
  `Usage.cached_tokens` reports the prompt tokens that were not evaluated in the call.
  Both live in `prefill.py`; this module loads the model and runs the sampling loop.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel

from jsonagent.cancel import current
from jsonagent.config import REPLY_TOKENS
from jsonagent.errors import ConfigError, ContextWindowExceeded, ModelError, ResponseFormatRejected
from jsonagent.models import Message, ModelReply, Usage
from jsonagent.models import catalog
from jsonagent.models.prefill import MIN_CACHED_PREFIX  # noqa: F401  re-exported: it lived here
from jsonagent.models.prefill import OnStatus, Prefill, prefix_cache

log = logging.getLogger("jsonagent.models")

INSTALL_HINT = (
    "the local backend needs llama-cpp-python: install jsonagent[local] "
    '(build it portably with CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON '
    '-DGGML_FMA=ON -DGGML_F16C=ON")'
)

TOOL_TURN = re.compile(r"""role['"]?\]?\s*==\s*['"]tool['"]""")
"""A chat template with a turn of its own for tool results compares the role to 'tool'."""


class LocalConfig(BaseModel):
    """How llama.cpp loads and samples; the defaults suit an agent on a small CPU."""

    n_ctx: int = 8192
    """Context window in tokens: the system prompt plus the whole run's history must fit."""
    n_threads: int | None = None
    """CPU threads; None takes $JSONAGENT_THREADS, else every core. On a machine busy with
    other work, fewer threads than cores are faster: llama.cpp's threads wait for each
    other spinning, and one that is not scheduled holds up the rest."""
    temperature: float = 0.0
    """0 picks the most likely token every time, which makes runs repeatable."""
    max_tokens: int = REPLY_TOKENS
    """Cap on the tokens of one reply."""
    seed: int = 0
    """Sampling seed, used when temperature is above 0."""
    verbose: bool = False
    """Let llama.cpp print its own logs to stderr."""
    kv_cache: bool = True
    """Keep the system prompt's KV state under $JSONAGENT_HOME/kv/ for the next process."""
    kv_cache_bytes: int = 2 << 30
    """Size cap of that folder; the least recently used states go first."""
    decoder: Literal["llguidance", "grammar"] = "llguidance"
    """Constrained decoding: llguidance in our sampling loop, or llama.cpp's grammar (slower)."""


class LocalModel:
    """A GGUF file loaded by llama-cpp-python; implements the `Model` protocol."""

    default_json_mode = "schema"
    """Grammar-constrained decoding is what this backend is for."""
    stops_on_cancel = True
    """A cancelled run's reply stops at the next token."""
    streams = True
    free = True
    """Its tokens are this machine's work: a run on it costs 0, by declaration."""

    def __init__(self, path: str | os.PathLike[str], config: LocalConfig | None = None,
                 on_status: OnStatus | None = None):
        self.path = Path(path).expanduser()
        self.config = config or LocalConfig()
        self.name = f"local:{self.path.name}"
        self._status = on_status or (lambda _: None)
        if not self.path.is_file():
            raise ConfigError(f"model file not found: {self.path}")
        try:
            import llama_cpp
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise ConfigError(INSTALL_HINT) from None
        self._llama_cpp = llama_cpp
        threads = self.config.n_threads or int(os.environ.get("JSONAGENT_THREADS") or 0) \
            or os.cpu_count() or 1
        self._status(f"loading {self.path.name}…")
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
        finally:
            self._status(None)
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            self._llm.close()
            raise ConfigError(f"{self.path} has no chat template in its metadata")
        model = self._llm._model
        eos, bos = self._llm.token_eos(), self._llm.token_bos()
        self._formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=model.token_get_text(eos) if eos != -1 else "",
            bos_token=model.token_get_text(bos) if bos != -1 else "",
        )
        self.observation_role = "tool" if TOOL_TURN.search(template) else "user"
        """Tool results go in the template's own tool turn when it has one (Qwen's
        `<tool_response>`), where the model was trained to read them. Shown as the user's
        words, the 1.5B model made its last call again at once in 9 of 24 tasks (7 of its 11
        failures); in the tool turn, in 2, and it solved 17 tasks instead of 13, losing none
        (bench/results/qwen2.5-coder-1.5b-instruct-q4/round5)."""
        self._vocab = llama_cpp.llama_model_get_vocab(self._llm.model)
        self._n_vocab = self._llm.n_vocab()
        self._grammars: dict[str, Any] = {}
        kv = prefix_cache(self.path, f"llama-cpp-python {llama_cpp.__version__}",
                          self.config.kv_cache_bytes) if self.config.kv_cache else None
        self._prefill = Prefill(self._llm, self._status, kv)
        self._guide: Any = None
        self._guide_ready = threading.Event()
        import importlib.util

        self.keeps_max_length = self.config.decoder == "llguidance" and \
            importlib.util.find_spec("llguidance") is not None
        """llguidance holds the thought to its maxLength; llama.cpp's grammar does not."""
        if self.config.decoder == "llguidance":
            # llguidance reads the whole vocabulary once (about a second): do it while the
            # first prompt is loaded or evaluated, not on the first reply's critical path.
            threading.Thread(target=self._build_guide, daemon=True).start()
        else:
            self._guide_ready.set()
        self._lock = threading.Lock()  # one llama.cpp context: concurrent runs take turns

    @classmethod
    def from_spec(cls, spec: str | None, config: LocalConfig | None = None,
                  on_status: OnStatus | None = None) -> "LocalModel":
        """`--model local[:SPEC]`: SPEC is a .gguf path or a catalog name.

        With no SPEC, `JSONAGENT_LOCAL_MODEL` is used when set, else the catalog's default
        model, which must have been pulled first.
        """
        spec = spec or os.environ.get("JSONAGENT_LOCAL_MODEL") or catalog.DEFAULT_LOCAL_MODEL
        if spec in catalog.CATALOG:
            return cls(catalog.path(spec), config, on_status)
        if not spec.endswith(".gguf") and not Path(spec).expanduser().exists():
            known = ", ".join(catalog.CATALOG)
            raise ConfigError(f"--model local:{spec}: not a .gguf file nor a known model ({known})")
        return cls(spec, config, on_status)

    def complete(self, messages: list[Message], response_format: dict | None, *,
                 stop: list[str] | None = None,
                 on_delta: Callable[[str], None] | None = None) -> ModelReply:
        from .decoding import schema_of

        try:
            schema = schema_of(response_format)
        except ResponseFormatRejected as exc:
            raise ResponseFormatRejected(f"{self.name}: {exc}") from None
        with self._lock:
            formatted = self._formatter(messages=messages)
            tokens = self._llm.tokenize(formatted.prompt.encode("utf-8"),
                                        add_bos=not formatted.added_special, special=True)
            if len(tokens) >= self.config.n_ctx:
                raise ContextWindowExceeded(
                    f"{self.name}: the prompt ({len(tokens)} tokens) does not fit in the "
                    f"context window ({self.config.n_ctx} tokens)", model=self.name)
            room = self.config.n_ctx - len(tokens)
            budget = min(self.config.max_tokens, room)
            matcher = self._matcher(schema) if schema is not None else None
            if schema is not None and matcher is None:
                reused = self._prefill.evaluate(
                    tokens, self._prefill.prefix_length(messages, formatted.prompt, tokens), last=False)
                text, generated, cut = self._grammar_completion(messages, response_format, budget,
                                                                stop, on_delta)
                steered = False
            else:
                reused = self._prefill.evaluate(
                    tokens, self._prefill.prefix_length(messages, formatted.prompt, tokens))
                text, generated, cut, steered = self._decode(matcher, budget, stop, room,
                                                             on_delta)
        return ModelReply(text=text, usage=Usage(prompt_tokens=len(tokens), completion_tokens=generated,
                                                 cached_tokens=reused), cut=cut, unended=steered)

    @property
    def context_tokens(self) -> int:
        """The context window (`n_ctx`): prompt and reply together."""
        return self.config.n_ctx

    def count_tokens(self, messages: list[Message]) -> int:
        """The exact prompt tokens of a request: the chat template llama.cpp itself applies,
        then its tokenizer."""
        result = self._formatter(messages=messages)
        return len(self._llm.tokenize(result.prompt.encode("utf-8"),
                                      add_bos=not result.added_special, special=True))

    def close(self) -> None:
        """Free the model now rather than at garbage collection."""
        self._guide_ready.wait()
        self._llm.close()

    # -- decoding ----------------------------------------------------------------------------

    def _decode(self, matcher, budget: int, stop: list[str] | None, room: int,
                on_delta: Callable[[str], None] | None = None) -> tuple[str, int, bool, bool]:
        """Our sampling loop: the text, its tokens, whether it was cut, and whether it was
        steered to its close (its end the decoder's, not the model's: never acted on). The
        last token is not evaluated, since nothing reads its logits.
        Near the end of the budget a constrained reply is steered to close (see `closing_pick`),
        so that a model looping inside a string still sends valid JSON; a reply that has run
        away (`runaway`) is steered from there on, not at the cap. What the schema still
        requires then (keys, a tool name, `}`) may run up to CLOSING_RESERVE past the budget,
        within the context (`room`). With `on_delta`, each accepted token's text is handed
        on as it is picked (whole characters only: a token may end inside one)."""
        import numpy as np

        from .decoding import CLOSING_RESERVE, CodeQuotes, Sampler, runaway

        llm, lib = self._llm, self._llama_cpp
        cancel = current()  # a cancelled run's reply stops at the next token
        sampler = Sampler(self.config.temperature, self.config.seed)
        closing_at = budget - min(CLOSING_RESERVE, budget // 4)
        limit = min(budget + CLOSING_RESERVE, room) if matcher is not None else budget
        out: list[int] = []
        ended = False
        write = _Writer(llm, on_delta) if on_delta is not None else None
        quotes = CodeQuotes(self._guide.quoting, llm.detokenize) if matcher is not None else None
        while len(out) < limit:
            if cancel is not None:
                cancel.check()
            if matcher is not None:
                forced = matcher.forced()[: limit - len(out)]
                if forced:
                    matcher.consume(forced)
                    out += forced
                    if write is not None:
                        write(forced)
                    if matcher.finished() or _stopped(llm, out, stop):
                        ended = True
                        break
                    llm.eval(forced)
                    continue
            if len(out) < closing_at and runaway(out):
                if matcher is None:
                    break
                closing_at = len(out)
            logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(llm.ctx, -1), shape=(self._n_vocab,))
            if matcher is not None and len(out) >= closing_at:
                token = matcher.closing_pick(logits, sampler)
            else:
                token = sampler.pick(logits)
                if matcher is not None and not matcher.allows(token):
                    token = sampler.pick(matcher.masked(logits))
                if quotes is not None and quotes.takes_back(out, token):  # `"` inside code
                    token = sampler.pick(quotes.forbid(matcher.masked(logits)))
            if lib.llama_vocab_is_eog(self._vocab, token):
                ended = True
                break
            out.append(token)
            if write is not None:
                write([token])
            if matcher is not None:
                matcher.consume([token])
                if matcher.finished():
                    ended = True
                    break
            if _stopped(llm, out, stop):
                ended = True
                break
            llm.eval([token])
        # steered to a close, a reply is still one the model did not finish: its JSON is
        # whole, yet its arguments may stop halfway (an amount of "10" for "1000000")
        steered = matcher is not None and len(out) > closing_at
        return (_cut(llm.detokenize(out).decode("utf-8", errors="ignore"), stop), len(out),
                not ended or steered, steered)

    def _matcher(self, schema: dict):
        """An llguidance matcher for `schema`, or None when it is unavailable here."""
        self._guide_ready.wait()
        if self._guide is None:
            return None
        try:
            return self._guide.matcher(schema)
        except ResponseFormatRejected as exc:
            raise ResponseFormatRejected(f"{self.name}: {exc}") from None

    def _build_guide(self) -> None:
        try:
            from .decoding import Guide

            self._guide = Guide(self._vocab, self._n_vocab)
        except Exception as exc:  # not installed, or no wheel for this platform
            from .kvcache import warn_once

            warn_once(f"fast constrained decoding is unavailable ({exc}): using llama.cpp's "
                       "grammar, which is slower")
        finally:
            self._guide_ready.set()

    def _grammar_completion(self, messages: list[Message], response_format: dict, budget: int,
                            stop: list[str] | None,
                            on_delta: Callable[[str], None] | None = None
                            ) -> tuple[str, int, bool]:
        """Today's path: llama-cpp-python's own loop under a GBNF grammar from the schema."""
        from .decoding import schema_of

        schema = schema_of(response_format)
        if response_format.get("type") == "json_object" and "schema" not in response_format:
            grammar = self._compiled("json", lambda g: g.from_string(self._llama_cpp.llama_grammar.JSON_GBNF))
        else:
            import json

            text = json.dumps(schema)  # property order matters: the grammar keeps it
            grammar = self._compiled(text, lambda g: g.from_json_schema(text, verbose=self.config.verbose))
        cancel = current()
        try:
            # streamed, so that a cancelled run's reply stops at the next token: closing the
            # stream ends llama.cpp's loop (an exception in its callbacks would be ignored)
            chunks = self._llm.create_chat_completion(
                messages=messages, grammar=grammar, temperature=self.config.temperature,
                max_tokens=budget, seed=self.config.seed, stop=stop, stream=True)
            pieces, finish = [], None
            for chunk in chunks:
                if cancel is not None and cancel.cancelled:
                    chunks.close()
                    cancel.check()
                choice = chunk["choices"][0]
                piece = choice["delta"].get("content") or ""
                pieces.append(piece)
                if piece and on_delta is not None:
                    on_delta(piece)
                finish = choice.get("finish_reason") or finish
        except ValueError as exc:
            raise ModelError(f"{self.name}: {exc}") from None
        text = "".join(pieces)
        generated = len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))
        return text, generated, finish == "length"

    def _compiled(self, key: str, build) -> Any:
        if key not in self._grammars:
            try:
                self._grammars[key] = build(self._llama_cpp.LlamaGrammar)
            except Exception as exc:  # the converter raises bare errors on schemas it cannot express
                raise ResponseFormatRejected(f"{self.name}: cannot turn the schema into a grammar: {exc}") from None
        return self._grammars[key]


class _Writer:
    """Tokens in, their text handed on: bytes that end inside a character wait for the rest."""

    def __init__(self, llm, on_delta: Callable[[str], None]):
        import codecs

        self._llm, self._on_delta = llm, on_delta
        # as the whole reply is decoded (`_decode`), so the pieces add up to its text
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")

    def __call__(self, tokens: list[int]) -> None:
        text = self._decoder.decode(self._llm.detokenize(tokens))
        if text:
            self._on_delta(text)


def _stopped(llm, out: list[int], stop: list[str] | None) -> bool:
    if not stop:
        return False
    tail = llm.detokenize(out[-16:]).decode("utf-8", errors="ignore")
    return any(s in tail for s in stop)


def _cut(text: str, stop: list[str] | None) -> str:
    """The text up to the first stop sequence."""
    for s in stop or ():
        at = text.find(s)
        if at >= 0:
            text = text[:at]
    return text

