"""A list of models as one model: the one retry policy, and fallback to the next model.

    Agent(model=[primary, "local:smollm2-135m"])      # builds FallbackModel(models, config.retry)

It implements the model protocol and declares the capabilities of the model that answers
now. It never waits and never rewrites a request: it raises `errors.TryAgain`, and the
request (request.py) says so in the event stream, waits on the run's cancel token, and sends
the request again, rebuilt for whatever the answering model declares (its JSON mode, tool-call
form, streaming, context window). So a cancel ends a backoff at once, and the loop knows
nothing of fallback.

What becomes of a failure:
- rate limited, unavailable, timed out: the same model again after a backoff (exponential,
  with jitter; the endpoint's Retry-After instead when a 429 or 503 gives one; both capped),
  up to `retries` times a request and `budget` times a run; then the next model;
- past the request's whole deadline (a slow drip, `ModelTimeout.past_deadline`): the next
  model at once, as another try would hold the run as long again;
- context window: raised as it is once, so that the memory summarises and the request is
  sent again (request.py); the second time, the next model;
- content filter, authentication, a spent quota: the next model at once (waiting won't help);
- anything else (a bad request, a refused response format): raised as it is;
- `fallback_on_invalid` replies in a row that could not be repaired: the next model.
On the last model the failure itself is raised, and the run ends on it.

Where a run stands (which model answers, what is left of its budget) is a `Route`, one per
stretch of a run: the model's own hook (see hooks.py) keeps it by the run's state, hands it
to `complete` through a context variable before each request, and forgets it when the run
stops or pauses (or its state is dropped, when nobody drove it to its end), so a resumed
run starts again from the primary, with a fresh retry budget.
"""

from __future__ import annotations

import random
import time
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, fields
from typing import Any, Callable

from ..config import RetryConfig
from ..errors import (TRANSIENT, AuthenticationFailed, ConfigError, ContentFiltered,
                      ContextWindowExceeded, ModelError, QuotaExceeded, ResponseFormatRejected,
                      ToolCallsRejected, TryAgain)
from . import Capabilities, Message, Model, ModelReply, capabilities

HOPELESS = (ContentFiltered, AuthenticationFailed, QuotaExceeded)
"""Failures that waiting cannot cure on this model, where another model may answer."""
_SAID = {"rate_limited": "rate limited", "unavailable": "unavailable", "timeout": "timed out",
         "context_window": "context window exceeded", "content_filter": "content filtered",
         "authentication": "authentication failed", "quota": "quota spent"}


@dataclass
class Route:
    """Where one run stands."""

    budget: int
    """Tries again left to the run."""
    at: int = 0
    """The model that answers: an index into the list."""
    tries: int = 0
    """Tries again of the request under way."""
    shrunk: bool = False
    """The request under way overflowed the window once already (and was summarised): as
    request.py's own flag, it holds for one request of a step and its takeovers reset it."""
    request: tuple[int, int] = (0, 0)
    """Which request of a step is under way: the run's steps and invalid replies when it
    began (a summary's reply between its sends is not a new one)."""
    invalid: int = 0
    free: int = 0
    steps: int = 0
    in_row: int = 0
    free_in_row: int = 0
    """The run's invalid replies, grammar re-asks (Stats.grammar_reasks) and steps when last
    seen, and invalid replies and grammar re-asks in a row."""
    switch: str | None = None
    """Why the next request goes to the next model, before it is sent (invalid replies)."""
    over: bool = False


_route: ContextVar[Route | None] = ContextVar("jsonagent_route", default=None)


class FallbackModel:
    """`models` in order of preference; `retry` says when to try again and when to move on."""

    def __init__(self, models: list[Model], retry: RetryConfig | None = None):
        if not models:
            raise ConfigError("a fallback model needs at least one model")
        self.models = list(models)
        self.retry = retry or RetryConfig.model_construct()
        self._caps = [capabilities(m) for m in self.models]
        self._routes: dict[int, Route] = {}
        """By the id of the run's state (see _Tracker)."""
        # the models' own hooks (a replayed script follows the run's calls) run beside ours
        self.hooks = (_Tracker(self), *(h for c in self._caps for h in c.hooks))

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(c.name for c in self._caps)})"

    def now(self) -> int:
        """The index of the model that answers the current run's next request."""
        route = _route.get()
        return route.at if route is not None and not route.over else 0

    def complete(self, messages: list[Message], response_format: dict | None, *,
                 stop: list[str] | None = None,
                 on_delta: Callable[[str], None] | None = None,
                 **more: Any) -> ModelReply:
        """`more`: the keywords a model that declares them takes (parallel_tool_calls)."""
        route = _route.get()
        if route is None or route.over:
            return self._alone(messages, response_format, stop, on_delta, more)
        if route.switch is not None:
            reason, route.switch = route.switch, None
            raise self._next(route, None, reason)
        model = self.models[route.at]
        try:
            reply = model.complete(messages, response_format, stop=stop, on_delta=on_delta,
                                   **more)
        except (ResponseFormatRejected, ToolCallsRejected):
            raise  # the request steps down, on this same model (request.py)
        except TRANSIENT as exc:
            if getattr(exc, "past_deadline", False):  # a slow drip: another try drips as long
                raise self._next(route, exc, "past the request's deadline") from None
            if route.tries < self.retry.retries and route.budget > 0:
                route.tries += 1
                route.budget -= 1
                wait = self._wait(exc, route.tries)
                raise TryAgain(f"{_SAID[exc.kind]}, retrying in {_seconds(wait)}",
                               cause=exc, wait_s=wait, retry=route.tries,
                               model=self._caps[route.at].name) from None
            raise self._next(route, exc, "retries spent" if route.budget > 0
                             else "the run's retry budget is spent") from None
        except ContextWindowExceeded as exc:
            if not route.shrunk:  # the memory summarises, and the request comes again
                route.shrunk = True
                raise
            raise self._next(route, exc, "still over the window once summarised") from None
        except HOPELESS as exc:
            raise self._next(route, exc, "retrying cannot help") from None
        route.tries = 0
        if len(self.models) > 1:
            reply.model = self._caps[route.at].name
        return reply

    def _next(self, route: Route, exc: ModelError | None, why: str) -> Exception:
        """Hand the request to the next model: the TryAgain that says so, or, when there is
        none, the failure itself."""
        if route.at + 1 >= len(self.models):
            return exc if exc is not None else ModelError(why)
        failed = self._caps[route.at].name
        route.at += 1
        route.tries, route.shrunk = 0, False
        said = _SAID.get(exc.kind, exc.kind) if exc is not None else why
        return TryAgain(f"{failed} {said} ({why if exc is not None else 'fallback_on_invalid'}); "
                        f"{self._caps[route.at].name} takes over", cause=exc, model=failed,
                        fallback=self._caps[route.at].name, takes_over=self._caps[route.at])

    def _wait(self, exc: ModelError, tries: int) -> float:
        """The endpoint's Retry-After, else an exponential backoff with jitter (from half to
        all of it, so that many clients turned away together do not come back together);
        at most `max_wait_s` either way."""
        if exc.retry_after is not None:
            return min(exc.retry_after, self.retry.max_wait_s)
        backoff = self.retry.backoff_s * 2 ** (tries - 1)
        return min(backoff * random.uniform(0.5, 1.0), self.retry.max_wait_s)

    def _alone(self, messages, response_format, stop, on_delta, more) -> ModelReply:
        """Called outside a run (a script, a judge): the same policy, waiting here."""
        token = _route.set(Route(budget=self.retry.budget))
        try:
            while True:
                try:
                    return self.complete(messages, response_format, stop=stop,
                                         on_delta=on_delta, **more)
                except TryAgain as again:
                    time.sleep(again.wait_s)
        finally:
            _route.reset(token)

    def close(self) -> None:
        for model in self.models:
            close = getattr(model, "close", None)
            if close is not None:
                close()


def _seconds(wait: float) -> str:
    return f"{wait:.0f} s" if wait >= 1 else f"{wait:.1f} s"


def _declared(name: str) -> property:
    """A capability of whichever model answers now."""
    return property(lambda self: getattr(self._caps[self.now()], name))


# every capability but the hooks follows the model that answers (see `Capabilities`)
for _field in fields(Capabilities):
    if _field.name != "hooks":
        setattr(FallbackModel, _field.name, _declared(_field.name))


class _Tracker:
    """The fallback model's hook: each run's `Route`, and its invalid replies in a row."""

    def __init__(self, owner: FallbackModel):
        self.owner = owner

    def before_model(self, state: Any) -> None:
        routes, retry = self.owner._routes, self.owner.retry
        invalid, free = state.stats.invalid_replies, state.stats.grammar_reasks
        route = routes.get(id(state))
        if route is None:
            route = routes[id(state)] = Route(budget=retry.budget, invalid=invalid, free=free,
                                              steps=len(state.steps))
            # an iterator left undrained never reaches on_end: the state's end ends it too
            weakref.finalize(state, routes.pop, id(state), None)
        request = (len(state.steps), state.stats.invalid_replies)
        if request != route.request:  # a new request of a step, not this one sent again
            route.request, route.shrunk = request, False
        if retry.fallback_on_invalid:
            if len(state.steps) > route.steps:  # a valid step since: the row is broken
                route.in_row = route.free_in_row = 0
            route.in_row += invalid - route.invalid
            route.free_in_row += free - route.free
            route.invalid, route.free, route.steps = invalid, free, len(state.steps)
            # a row of replies written without a costly grammar, each asked for again under
            # it, is not the model failing: the grammar's try may well hold. One made under
            # the grammar counts them all, so that N = max_reasks can still fire in a step
            if route.in_row >= retry.fallback_on_invalid \
                    and route.in_row > route.free_in_row \
                    and route.at + 1 < len(self.owner.models):
                route.switch = f"{route.in_row} invalid replies in a row"
                route.in_row = route.free_in_row = 0
        _route.set(route)

    def on_end(self, state: Any, result: Any) -> None:
        route = self.owner._routes.pop(id(state), None)
        if route is not None:
            route.over = True


def each(model: Model) -> list[Capabilities]:
    """The capabilities of every model that may answer: a fallback model's each, in order;
    any other model's own."""
    return list(model._caps) if isinstance(model, FallbackModel) else [capabilities(model)]


def fallback(models: list[Model], retry: RetryConfig | None = None) -> Model:
    """The model an agent runs on: a FallbackModel for a list of several, or for one that is
    reached over the network (its requests may fail for now); any other model as it is."""
    if len(models) == 1 and (isinstance(models[0], FallbackModel)
                             or capabilities(models[0]).base_url is None):
        return models[0]
    return FallbackModel(models, retry)
