"""A schema's regular expressions: which ones are accepted, and how one is matched.

Every pattern keyword is matched by the `regex` engine with a timeout. It lets other threads
run while it matches; `re` holds the GIL, so a thread watching it would not help, and one
catastrophic pattern froze the whole server.
"""

from __future__ import annotations

MATCH_TIMEOUT_S = 0.1
"""One pattern against one string; past it the value is refused, never waited for."""
_REPEATS = 10_000
"""What a pattern's counted repeats multiply to: `regex` compiles `(a{1000}){1000}` by
writing it out (0.4 s holding the GIL), and `a{4000000000}` by running out of memory."""


def pattern_problem(pattern: str, most: int) -> str | None:
    """Why `pattern` is refused (longer than `most` characters, not a regular expression,
    or too costly to compile); None when it may be matched."""
    if len(pattern) > most:
        return f"a pattern of {len(pattern)} characters; at most {most}"
    try:
        repeats = _repeats(_parse(pattern))
    except Exception as exc:  # re.error, OverflowError, RecursionError
        return f"not a regular expression: {exc}"
    if repeats > _REPEATS:
        return f"its counted repeats multiply to {repeats}; at most {_REPEATS}"
    return None


def search(pattern: str, text: str) -> bool | None:
    """Whether `pattern` matches in `text`; None when it took too long to tell."""
    import regex

    try:
        return regex.search(pattern, text, timeout=MATCH_TIMEOUT_S) is not None
    except TimeoutError:
        return None


def _parse(pattern: str):
    try:
        from re import _parser  # Python 3.11+
    except ImportError:  # pragma: no cover
        import sre_parse as _parser
    return _parser.parse(pattern)


def _repeats(pattern) -> int:
    """About how many nodes `regex` compiles the parsed pattern into: a counted repeat's
    body is written out its fixed number of times (`{n}`, the n of `{n,m}`)."""
    total = 0
    for op, arg in pattern:
        inner = sum(_repeats(sub) for sub in _subpatterns(arg)) or 1
        times = arg[0] if getattr(op, "name", "").endswith("_REPEAT") else 1
        total += max(times, 1) * inner
    return total


def _subpatterns(arg):
    if isinstance(arg, (tuple, list)):
        for part in arg:
            if hasattr(part, "data"):  # a parsed SubPattern
                yield part
            else:
                yield from _subpatterns(part)
