"""Picking tokens: a sampler, and llguidance constraints that keep a reply inside a schema.

The constraint is checked after sampling, not before: the model's own pick is validated
against the grammar (a few microseconds), and the full-vocabulary mask is computed only when
that pick is refused. Text the grammar forces (keys, `{"thought": "`, a tool name once its
prefix is unique) comes back from `forced()` as tokens to evaluate in one batch.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from jsonagent.errors import ModelError, ResponseFormatRejected

CLOSING_RESERVE = 32
"""The last tokens of a reply's budget, in which a constrained reply is steered to close."""
RUNAWAY = 64
"""A reply whose last this many tokens repeat one short pattern has run away: `999999...` to
the cap (three 80-second replies in one task on the 1.5B model), or a number whose digits
cycle, `...8628034825342117688998628034825342117688...` (21 tokens a turn, three 1,024-token
replies in one task)."""
PERIOD = 32
"""The longest pattern `runaway` looks for, in tokens."""
CLOSERS = frozenset(b'"}]')
"""The bytes of a token that closes a string, an object or an array, and opens nothing."""

JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""One layout, the one the system prompt shows: nothing left to choose, so more is forced."""


def runaway(out: list[int]) -> bool:
    if len(out) < RUNAWAY:
        return False
    tail = out[-RUNAWAY:]
    # periods 1 and 2 are any mix of two tokens; longer ones must repeat exactly
    return len(set(tail)) <= 2 or any(tail[p:] == tail[:-p] for p in range(3, PERIOD + 1))


TAKEBACKS = 8
"""Closing quotes a reply may have taken back (see CodeQuotes); past them, it closes as the
model wants, so that a model set on closing cannot loop."""
_CODE_VALUE = re.compile(r'"code"\s*:\s*"$')
_UNCLOSED = ("unterminated string literal", "unterminated triple-quoted string",
             "was never closed", "unexpected EOF", "EOF while scanning")
"""SyntaxError messages of code cut short inside a string or a bracket (Python 3.10+), not
of code that is merely wrong."""


class CodeQuotes:
    """A `"` inside a code argument's string closes the JSON string early: `print("hi")`
    written raw ends the code at `print(`. The grammar cannot know; the code can. When the
    sampled token would close a `"code"` value whose code then cannot compile because a
    string or a bracket is left open, the token is taken back before it is evaluated, and
    the pick is made again with every token that closes a string forbidden at that place:
    the model writes `\"` (or `'`) and goes on. Found on the 1.5B model (issue 37, round 6)."""

    def __init__(self, quoting: np.ndarray, detokenize):
        self.quoting = quoting
        """Per token: its bytes hold a `"` that no backslash of its own escapes."""
        self._detokenize = detokenize
        self.taken_back = 0

    def takes_back(self, out: list[int], token: int) -> bool:
        if self.taken_back >= TAKEBACKS or not self.quoting[token]:
            return False
        text = self._detokenize(out).decode("utf-8", errors="ignore")
        piece = self._detokenize([token]).decode("utf-8", errors="ignore")
        if closes_code_early(text, piece):
            self.taken_back += 1
            return True
        return False

    def forbid(self, logits: np.ndarray) -> np.ndarray:
        """`logits` (already masked by the grammar) without the tokens that close a string;
        unchanged when nothing else would be left."""
        out = logits.copy()
        out[: self.quoting.shape[0]][self.quoting[: out.shape[0]]] = -np.inf
        return out if np.isfinite(out).any() else logits


def closes_code_early(text: str, piece: str) -> bool:
    """`piece`, written after `text`, ends an open `"code"` string where the code so far
    cannot compile for a string or a bracket left open."""
    raw = open_code(text)
    if raw is None:
        return False
    escaped = (len(raw) - len(raw.rstrip("\\"))) % 2 == 1
    for at, ch in enumerate(piece):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            break
    else:
        return False
    try:
        code = json.loads('"' + raw + piece[:at] + '"')
        compile(code, "<code>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return any(words in str(exc.msg) for words in _UNCLOSED)
    except (ValueError, RecursionError, MemoryError, OverflowError):  # not JSON, or odd code
        return False
    return False


def open_code(text: str) -> str | None:
    """The raw JSON text of a `"code"` value still open at the end of `text`, else None."""
    in_string = escaped = False
    start = 0
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif in_string:
            if ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string, start = True, i + 1
    if not in_string or not _CODE_VALUE.search(text[:start]):
        return None
    return text[start:]


def _quoting(piece: bytes) -> bool:
    escaped = False
    for byte in piece:
        if escaped:
            escaped = False
        elif byte == 0x5C:
            escaped = True
        elif byte == 0x22:
            return True
    return False


class Sampler:
    """Greedy at temperature 0 (repeatable); otherwise top-k sampling from a seeded generator."""

    top_k = 40

    def __init__(self, temperature: float, seed: int):
        self.temperature = temperature
        self.rng = np.random.default_rng(seed)

    def pick(self, logits: np.ndarray) -> int:
        if self.temperature <= 0:
            return int(np.argmax(logits))
        k = min(self.top_k, logits.shape[0])
        top = np.argpartition(logits, -k)[-k:]
        z = logits[top].astype(np.float64) / self.temperature
        p = np.exp(z - z.max())
        return int(self.rng.choice(top, p=p / p.sum()))


def schema_of(response_format: dict | None) -> dict | None:
    """The JSON schema a response_format asks for; None for plain text."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object" and "schema" not in response_format:
        return {"type": "object"}
    schema = (response_format.get("json_schema") or {}).get("schema") if kind == "json_schema" \
        else response_format.get("schema")
    if kind not in ("json_schema", "json_object") or not isinstance(schema, dict):
        raise ResponseFormatRejected(f"unsupported response_format {kind!r}")
    return schema


class Guide:
    """llguidance for one model's vocabulary; compiled matchers are kept per schema."""

    def __init__(self, vocab: Any, n_vocab: int):
        import llguidance

        self._llg = llguidance
        self.n_vocab = n_vocab
        # one to a few seconds: once per model
        self.tokenizer, pieces = _tokenizer(llguidance, vocab)
        self.closers = np.array([t for t, p in enumerate(pieces) if p and set(p) <= CLOSERS],
                                dtype=np.int64)
        self.quoting = np.array([not p.startswith(b"\xff") and _quoting(p) for p in pieces],
                                dtype=bool)
        self._matchers: dict[str, Matcher] = {}

    def matcher(self, schema: dict) -> "Matcher":
        key = json.dumps(schema)  # property order matters: the grammar keeps it
        if key not in self._matchers:
            grammar = self._llg.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
            inner = self._llg.LLMatcher(self.tokenizer, grammar, log_level=0)
            if inner.is_error():
                raise ResponseFormatRejected(f"cannot turn the schema into a grammar: {inner.get_error()}")
            self._matchers[key] = Matcher(inner, self.n_vocab, self.closers)
        matcher = self._matchers[key]
        matcher.reset()
        return matcher


def _tokenizer(llguidance: Any, vocab: Any) -> Any:
    """llguidance's view of a llama.cpp vocabulary: every token's bytes, special ones marked."""
    import ctypes

    import llama_cpp

    size = llama_cpp.llama_vocab_n_tokens(vocab)
    special = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
    room = 256
    buffer = ctypes.create_string_buffer(room)
    pieces = []
    for token in range(size):
        n = llama_cpp.llama_token_to_piece(vocab, token, buffer, room, 0, True)
        if n < 0:  # longer than the buffer: -n is the length it needs
            room = -n
            buffer = ctypes.create_string_buffer(room)
            n = llama_cpp.llama_token_to_piece(vocab, token, buffer, room, 0, True)
        piece = buffer.raw[:n]
        attr = llama_cpp.llama_vocab_get_attr(vocab, token)
        if attr & special or (attr & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
                              and piece.startswith(b"<") and piece.endswith(b">")):
            piece = b"\xff" + piece  # how llguidance tells a special token from its text
        pieces.append(piece)
    tokenize = ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
    return llguidance.LLTokenizer.from_llamacpp(
        tokens=pieces, vocab_ptr=vocab, tokenize_fptr=tokenize,
        eos_token=llama_cpp.llama_vocab_eos(vocab), slices=llguidance.LLTokenizer.json_slices()), pieces


class Matcher:
    """Where one reply stands in its grammar."""

    def __init__(self, inner: Any, n_vocab: int, closers: np.ndarray):
        self._m = inner
        self.n_vocab = n_vocab
        self.closers = closers
        self.masks = 0
        """How many times the full mask was needed: the model's pick was refused."""

    def reset(self) -> None:
        self._m.reset()
        self.masks = 0

    def forced(self) -> list[int]:
        return list(self._m.compute_ff_tokens())

    def allows(self, token: int) -> bool:
        return self._m.validate_tokens([token]) == 1

    def masked(self, logits: np.ndarray) -> np.ndarray:
        """A copy of `logits` with every token the grammar refuses set to -inf."""
        self.masks += 1
        bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(bits, bitorder="little")[: logits.shape[0]].astype(bool)
        if logits.shape[0] > allowed.shape[0]:
            allowed = np.pad(allowed, (0, logits.shape[0] - allowed.shape[0]))
        return np.where(allowed, logits, -np.inf)

    def closing_pick(self, logits: np.ndarray, sampler: Sampler) -> int:
        """A token on the way out: the likeliest allowed closer (`"`, `}`, `"}`...), else the
        model's pick among allowed tokens (a required key or a tool name must come first)."""
        masked = self.masked(logits)
        closing = masked[self.closers]
        if closing.size and np.isfinite(closing).any():
            return int(self.closers[int(np.argmax(closing))])
        return sampler.pick(masked)

    def consume(self, tokens: list[int]) -> None:
        if not self._m.consume_tokens(tokens):
            raise ModelError(f"llguidance refused its own tokens: {self._m.get_error()}")

    def finished(self) -> bool:
        """Nothing but the end of the reply can follow."""
        return self._m.is_stopped()
