"""Tokens a model call used, and a run's running total of them: a value every layer reads."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Usage(BaseModel):
    model_config = ConfigDict(defer_build=True)

    prompt_tokens: int = 0
    """Tokens in the prompt, as the backend counted them."""
    completion_tokens: int = 0
    """Tokens generated."""
    cached_tokens: int = 0
    """Prompt tokens served from a reused prefix (KV cache), when the backend reports it."""
    counting: str = ""
    """How the context budget counted tokens: "exact" (the backend's own tokenizer) or
    "estimate" (characters, calibrated against the prompt_tokens the endpoint reports);
    "" when no budget applied."""

    def add(self, other: "Usage") -> None:
        """Count `other` in, in place: a run adds every reply's usage to its own, and a new
        model each step cost more than the rest of the bookkeeping. The fields are plain
        numbers we own, so they are set past pydantic's __setattr__."""
        d = self.__dict__
        d["prompt_tokens"] += other.prompt_tokens
        d["completion_tokens"] += other.completion_tokens
        d["cached_tokens"] += other.cached_tokens
        d["counting"] = other.counting or self.counting
