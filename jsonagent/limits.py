"""A run's usage limits (config.UsageLimits, and each tool's `max_calls`), checked in one
place: `Limits.check`, before each model request and before each tool call.

What a run has used is read from its state (its usage, its model calls, its steps), never
counted beside it, so a resumed run, in this process or another, is held to the same
limits. Reaching a run's limit raises `LimitReached`, and the loop ends the run
`limit_reached`; a call past a tool's own limit is refused with an observation, and the run
goes on. From `warn_at` of a limit on, each observation tells the model what is left.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .errors import LimitReached
from .notes import note
from .status import Reason

if TYPE_CHECKING:
    from .config import AgentConfig
    from .pricing import Price
    from .state import RunState
    from .tools.toolset import Toolset

TOKENS = ("input_tokens", "total_tokens", "cost")
"""The limits a request's own tokens count against: only they make the check count them."""


class Limits:
    def __init__(self, config: AgentConfig, toolset: Toolset):
        limits = config.limits
        self.warn_at = limits.warn_at
        self.set = {k: v for k, v in limits if v is not None and k != "warn_at"}
        """The run's limits that are set, by name."""
        self.per_tool = {t.name: t.spec.max_calls for t in toolset if t.spec.max_calls}
        self.final = toolset.final.name
        self.counts_requests = any(k in self.set for k in TOKENS)
        """The request's tokens are counted before it is sent (else never)."""
        self.on = bool(self.set or self.per_tool)
        self._tallied, self._calls_of, self._all_calls = 0, {}, 0
        """The steps counted so far, and their calls by tool and in all: steps are only
        ever appended, so each is counted once (a resumed run's Loop counts them again)."""

    def check(self, s: RunState, *, tokens: Callable[[], int] | None = None,
              price: Price | None = None, tool: str | None = None,
              call: int = 0) -> str | None:
        """Before a model request (`tokens` counts its prompt; `price` is that of the model
        it goes to, the requester's), or before the call of `tool` (call `call` of the step
        in flight): raise LimitReached when it would take the run past one of its limits;
        return the observation that refuses a call past the tool's own."""
        if not self.on:
            return None
        if tool is None:
            asked = tokens() if tokens is not None and self.counts_requests else 0
            for name, (used, more) in self._request(s, asked, price).items():
                what = f"the next request would add {_shown(name, more)}" \
                    if name in TOKENS else "the run needs another model request"
                self._within(name, used, more, what)
            return None
        calls = s.steps[-1].calls
        later = calls[call + 1:]  # the step's calls after this one: not yet
        if "tool_calls" in self.set:
            # a parallel step's calls are all decided before any runs: those before this one
            # count against the limit, but the message says only what ran
            asked = sum(c.tool != self.final and not c.done for c in calls)
            what = "the model asked for another" if asked == 1 else \
                f"the model asked for {asked} more in one step, none of which ran"
            self._within("tool_calls", self._calls(s) - 1 - sum(c.tool != self.final
                                                                for c in later),
                         1, what, ran=self._calls(s) - asked)
        limit = self.per_tool.get(tool)
        if limit is not None and \
                self._calls(s, tool) - 1 - sum(c.tool == tool for c in later) >= limit:
            return note("tool_limit", tool=tool, limit=limit, s=_s(limit), final=self.final)
        return None

    def left(self, s: RunState, tool: str | None = None) -> str | None:
        """The note that tells the model what is left of each limit it has used `warn_at`
        of, counting the call of `tool` just made; None while none is near."""
        if not self.on:
            return None
        pieces = []
        for name, used in self._used(s).items():
            limit = self.set[name]
            if used is not None and used >= self.warn_at * limit:
                left = max(limit - used, 0)
                n = f"{left:.4f}" if name == "cost" else left
                pieces.append(note(f"limit_{name}", n=n, s=_s(left)))
        limit = self.per_tool.get(tool)
        if limit is not None:
            calls = self._calls(s, tool)
            if calls >= self.warn_at * limit:
                left = max(limit - calls, 0)
                pieces.append(note("limit_tool", n=left, s=_s(left), tool=tool))
        return note("limit_left", left=", ".join(pieces), final=self.final) if pieces else None

    # -- what the run has used ----------------------------------------------------------------

    def _used(self, s: RunState) -> dict[str, float | int | None]:
        """What the run has used of each limit that is set (a cost None: unknown)."""
        u, out = s.usage, {}
        for name in self.set:
            out[name] = s.stats.model_calls if name == "requests" \
                else self._calls(s) if name == "tool_calls" \
                else u.prompt_tokens if name == "input_tokens" \
                else u.completion_tokens if name == "output_tokens" \
                else u.prompt_tokens + u.completion_tokens if name == "total_tokens" \
                else 0.0 if u.empty() else u.cost
        return out

    def _request(self, s: RunState, tokens: int, price: Price | None) -> dict[str, tuple]:
        """What the run has used of each limit a request counts against, and what this
        request adds to it (its output, unknown before the reply, as 1: the next token)."""
        used = self._used(s)
        more = {"requests": 1, "input_tokens": tokens, "output_tokens": 1,
                "total_tokens": tokens + 1}
        if "cost" in used:
            more["cost"] = (price.input_cost(tokens) if price is not None else None) or 0.0
        return {k: (used[k], more[k]) for k in used if k != "tool_calls"}

    def _within(self, name: str, used: float | int | None, more: float | int, what: str,
                ran: int | None = None) -> None:
        """Raise LimitReached when `more` takes `used` past the limit; the message says
        `ran` used when that differs (calls decided but not run)."""
        limit = self.set[name]
        if used is None:  # a part of the run whose price is unknown (a summary model's)
            raise LimitReached(Reason.limit_reached(name, _shown(name, limit), "an unknown "
                                                    "amount", what), name)
        if used + more > limit:
            raise LimitReached(Reason.limit_reached(name, _shown(name, limit),
                                                    _shown(name, used if ran is None else ran),
                                                    what), name)

    def _calls(self, s: RunState, tool: str | None = None) -> int:
        """Calls the run's steps made (of `tool`, or of any tool but the final answer), the
        one in flight included."""
        steps, counts = s.steps, self._calls_of
        for i in range(self._tallied, len(steps)):
            for call in steps[i].calls:
                name = call.tool
                counts[name] = counts.get(name, 0) + 1
                self._all_calls += name != self.final
        self._tallied = len(steps)
        return self._all_calls if tool is None else counts.get(tool, 0)


def _s(n: float) -> str:
    return "" if n == 1 else "s"


def _shown(name: str, value: float) -> str:
    return f"${value:.4f}" if name == "cost" else str(value)
