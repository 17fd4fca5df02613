"""Run settings, grouped so that constructors stay short."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

JsonMode = Literal["schema", "object", "prompt"]
JSON_MODES: tuple[JsonMode, ...] = ("schema", "object", "prompt")
REPLY_TOKENS = 1024
"""The most tokens a reply may have, unless set: sent with every request as its cap."""


class RetryConfig(BaseModel):
    """When a failed model request is sent again, and when the next model takes it over
    (models/fallback.py)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)

    retries: int = Field(3, ge=0)
    """Tries again of one request that was rate limited, overloaded or timed out, before the
    next model takes it (or, on the last model, the run fails)."""
    budget: int = Field(10, ge=0)
    """Tries again in all, per stretch of a run (a pause ends one: a resumed run has its
    budget anew): once spent, such a failure goes to the next model at once."""
    backoff_s: float = Field(1.0, ge=0)
    """The first wait; each next one doubles, with jitter. An endpoint's Retry-After replaces it."""
    max_wait_s: float = Field(30.0, ge=0)
    """The longest wait, Retry-After included: a longer one is cut to this."""
    fallback_on_invalid: int | None = Field(None, ge=1)
    """Replies in a row that could not be repaired before the next model takes over; None:
    invalid replies never change the model."""


class UsageLimits(BaseModel):
    """What one run may use; None leaves a measure unlimited. They are checked before each
    model request and each tool call (limits.py): reaching one ends the run `limit_reached`,
    and from `warn_at` of a limit on, each observation tells the model what is left."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    requests: int | None = Field(None, ge=1)
    """Model requests, re-asks included."""
    tool_calls: int | None = Field(None, ge=1)
    """Tool calls in all, whatever became of them; the final answer is not one."""
    input_tokens: int | None = Field(None, ge=1)
    """Prompt tokens over the run's requests, the next one's counted before it is sent
    (exactly where the model counts them, else estimated)."""
    output_tokens: int | None = Field(None, ge=1)
    """Tokens the model wrote."""
    total_tokens: int | None = Field(None, ge=1)
    """Input and output tokens together."""
    cost: float | None = Field(None, gt=0)
    """What the run may cost, in US dollars (`Usage.cost`). A model whose price is unknown
    is refused at the start, rather than never reaching it."""
    warn_at: float = Field(0.8, gt=0, le=1)
    """The share of a limit from which the model is told what is left."""


class AgentConfig(BaseModel):
    """How an agent's runs behave and what they may use: `Agent(config=AgentConfig(...))`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)

    max_steps: int = Field(10, ge=1)
    """Tool calls allowed before the run stops with status max_steps."""
    max_reasks: int = Field(2, ge=0)
    """Invalid replies re-asked per step before the run fails; separate from max_steps."""
    json_mode: JsonMode | None = None
    """How JSON is forced: schema, object or prompt. None takes the model's default."""
    prompt_style: Literal["json", "react"] = "json"
    """How requests are written: JSON steps, or the ReAct text protocol with an Observation stop."""
    observation_role: Literal["user", "tool", "system"] | None = None
    """Role of the message that carries a tool's result back to the model. None takes the
    model's: `tool` for a local model whose chat template has a tool turn, else `user`."""
    tool_calls: bool | None = None
    """Send each step and its result in the endpoint's native tool-call form (an assistant
    message with `tool_calls`, then a `tool` message). None takes the model's: on for
    OpenAI-compatible endpoints. An endpoint that refuses it is stepped down once."""
    max_observation_chars: int = Field(8000, ge=200)
    """Longer tool results are cut in the context, with a note saying so (the run's record
    keeps them whole)."""
    max_context_tokens: int | None = Field(None, ge=256)
    """The context budget: most tokens one request may carry. None takes the model's context
    window minus `reply_tokens` where the model knows it (n_ctx for local models), else no
    budget. Older turns are summarised to stay under it."""
    reply_tokens: int = Field(REPLY_TOKENS, ge=16)
    """The most tokens a reply may have: every request to a model built from its name
    carries it as its cap (`max_tokens`), and the context budget keeps that much free."""
    summary_model: str | None = None
    """A cheaper model for the summaries (a --model name); None uses the run's model."""
    stall_after: int | None = Field(2, ge=2)
    """The same call, or the same result, this many times: the model is told it repeats
    itself; once more and the run ends `stalled`. None turns stall detection off."""
    thought_max_chars: int | None = Field(600, ge=16)
    """Cap on the thought's length in schema mode; constrained decoders enforce it, which
    keeps small models from rambling. None for no cap."""
    sandbox_timeout: float = Field(30.0, gt=0)
    """Seconds one code-interpreter call may run."""
    sandbox_memory_mb: int = Field(1024, ge=64)
    """Memory (address space) the code interpreter may use, in MB."""
    sandbox_output_bytes: int = Field(65536, ge=0)
    """Bytes of each stream (stdout, stderr) the code interpreter keeps a call; the rest is
    cut, and the model is told so."""
    require_isolation: bool = False
    """Refuse to run code unless every sandbox protection is in force."""
    max_depth: int = Field(3, ge=0)
    """How deep agents used as tools may nest below a top run: a sub-run past it is refused
    (an agent that calls itself ends there)."""
    check_answers: bool | None = None
    """Before a run accepts its final answer, look for each of its numbers in the question,
    the tool results and the person's answers (grounding.py); one found nowhere gets one
    nudge, and calling the final tool again confirms it. None takes the model's: on, except
    for a model whose replies are written ahead (a script cannot answer a nudge)."""
    parallel_calls: int = 1
    """The most tool calls one step may make, run side by side: 1 keeps today's one call a
    step; N of 2 or more has the model reply {"thought": ..., "calls": [...]} with 1 to N
    calls, for models that plan in parallel (the JSON prompt style only). N is also how
    many of a step's calls run at once."""
    confirm: list[str] = []
    """Tools whose every call waits for a person's approval, beside those whose spec says so."""
    retry: RetryConfig = Field(default_factory=RetryConfig.model_construct)  # no validator built
    """Retries of failed model requests, and fallback to the next model (`Agent(model=[...])`)."""
    limits: UsageLimits = UsageLimits.model_construct()
    """What one run may use (see UsageLimits); a tool's own limit is its spec's max_calls."""

    @field_validator("parallel_calls", mode="before")
    @classmethod
    def _calls(cls, n: object) -> object:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"parallel_calls is the most tool calls one step may make: 1 (one "
                             f"call a step, the default) or more, to run several side by "
                             f"side; got {n!r}")
        return n
