"""Untrusted text made safe for a terminal: what a client or a model wrote (a session's
name from an AG-UI threadId, a question, an answer) is printed, never obeyed.

A control character could move the cursor, rewrite what is on screen or set the window's
title; a bidirectional override could make a line read otherwise than it is. Each is shown
as its escape (`\\x1b`, `\\u202e`), so the text stays readable and nothing in it acts.
"""

from __future__ import annotations

import re

_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_BREAKS = re.compile("[\t\n]")


def printable(text: str, lines: bool = False) -> str:
    """`text` with every character that would act on the terminal escaped; tabs and new
    lines too, unless `lines` (a text of several lines, printed as such)."""
    out = _ACTIVE.sub(_escape, text)
    return out if lines else _BREAKS.sub(_escape, out)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
