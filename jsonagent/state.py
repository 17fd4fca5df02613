"""A run as a value: everything needed to continue it, in one pydantic model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Role = Literal["system", "user", "assistant", "observation"]


class Message(BaseModel):
    """One entry of the stored history, in no prompt style in particular.

    An assistant message holds a step as JSON (`Step.to_json()`); an observation holds
    `{"tool_name": ..., "response": ..., "note"?: ...}` as JSON. A prompt style renders them
    for each request (`prompt.PromptStyle.render`).
    """

    role: Role
    content: str
