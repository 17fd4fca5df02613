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
    cost: float | None = None
    """What it cost, in US dollars, from genai-prices where the model and its provider are
    known (pricing.py); 0 for a model that costs nothing by declaration (in-process
    llama.cpp). None when unknown, never 0: a total with one unknown part is unknown."""
    counting: str = ""
    """How the context budget counted tokens: "exact" (the backend's own tokenizer) or
    "estimate" (characters, calibrated against the prompt_tokens the endpoint reports);
    "" when no budget applied."""

    def add(self, other: "Usage") -> None:
        """Count `other` in, in place: a run adds every reply's usage to its own, and a new
        model each step cost more than the rest of the bookkeeping. The fields are plain
        numbers we own, so they are set past pydantic's __setattr__."""
        d = self.__dict__
        # an unknown part makes the total unknown; an empty one (no tokens, no cost: a
        # failed call, or a total with nothing in it yet) changes nothing
        if other.cost is not None or other.prompt_tokens or other.completion_tokens:
            d["cost"] = other.cost if self.empty() else None if d["cost"] is None \
                or other.cost is None else d["cost"] + other.cost
        d["prompt_tokens"] += other.prompt_tokens
        d["completion_tokens"] += other.completion_tokens
        d["cached_tokens"] += other.cached_tokens
        d["counting"] = other.counting or self.counting

    @classmethod
    def reported(cls, prompt_tokens: object, completion_tokens: object,
                 cached_tokens: object = 0) -> "Usage":
        """The usage an endpoint reported, whose counts are anything its JSON held: a count
        that is not a non-negative integer raises ValueError naming it, since a negative or
        null one would keep a token limit from ever firing (limits.py)."""
        counts = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "cached_tokens": cached_tokens}
        for name, value in counts.items():
            if type(value) is not int or value < 0:  # bool is an int to Python, not a count
                shown = repr(value)
                raise ValueError(f"{name} {shown[:40] + '...' if len(shown) > 40 else shown} "
                                 "is not a count of tokens (a non-negative integer)")
        return cls.model_construct(**counts)

    def empty(self) -> bool:
        """Nothing counted: no tokens, and so no cost either."""
        return self.cost is None and not (self.prompt_tokens or self.completion_tokens)
