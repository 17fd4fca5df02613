"""A case of an eval and a variant it runs under: plain values, which travel to workers."""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from . import evaluators as ev


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    input: str = Field(min_length=1)
    """The question."""
    name: str = ""
    """Unique in the dataset; "case-N" when not given."""
    tags: list[str] = []
    expected: Any = None
    """The answer: text (equal after trimming), a number, or an object (equal field by field)."""
    evaluators: list[Any] = []
    """Evaluators, or functions `(case, result) -> bool | float | (score, reason)`."""
    human: list[str] = []
    """The person's answers to the agent's questions, in order."""
    human_after: str | None = None
    """The answer to every later question; None: nobody answers, and the run pauses."""
    approve: str | dict[str, str] = "deny"
    """approve, deny, or one of them per tool ("*" for the rest) for calls that need it."""
    output_type: dict | None = None
    """A JSON Schema (an object) the final answer must be valid against."""
    tools: list[str] = []
    """Tool spec files or directories, beside the command's own --tools."""
    mcp: list[str] = []
    mcp_config: list[str] = []
    max_steps: int | None = Field(None, ge=1)

    @field_validator("evaluators")
    @classmethod
    def _evaluators(cls, value):
        return [ev.evaluator(v) for v in value]

    @field_validator("approve")
    @classmethod
    def _policy(cls, value):
        for v in [value] if isinstance(value, str) else value.values():
            if v not in ("approve", "deny"):
                raise ValueError(f"{v!r} is neither approve nor deny")
        return value

    def checks(self, shared: list[ev.Evaluator] = ()) -> list[ev.Evaluator]:
        """What scores this case: the dataset's evaluators, `expected`, then its own; a
        case with none passes when its run completes."""
        own = list(shared)
        if self.expected is not None:
            own.append(ev.Fields(self.expected, name="expected") if isinstance(self.expected, dict)
                       else ev.Number(self.expected, name="expected")
                       if isinstance(self.expected, (int, float)) else
                       ev.Equals(self.expected, name="expected"))
        own += self.evaluators
        return own or [ev.Status()]

    def ask_human(self) -> Callable[[str], str | None]:
        """The scripted person for one run: each question gets the next answer."""
        answers = iter(self.human)
        return lambda question: next(answers, self.human_after)

    def approver(self) -> Callable[[str, dict], bool]:
        policy = self.approve
        return lambda tool, args: (policy if isinstance(policy, str)
                                   else policy.get(tool, policy.get("*", "deny"))) == "approve"

    def answer_type(self) -> type | None:
        return None if self.output_type is None else schema_type(self.output_type)


class Variant(BaseModel):
    """One setting the cases run under: a model, its sampling, any AgentConfig field."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    model: str | None = None
    """A --model name; None takes the command's --model."""
    temperature: float | None = Field(None, ge=0)
    base_url: str | None = None
    config: dict[str, Any] = {}
    """AgentConfig fields (prompt_style, json_mode, max_steps...)."""


def schema_type(schema: dict) -> type:
    """A type whose values are the data valid against `schema`, for an agent's output_type:
    the task-complete tool takes the schema as its parameters."""
    import jsonschema
    from pydantic_core import core_schema

    from ..tools.schema import validator as make_validator

    validator = make_validator(schema)

    def check(value):
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            where = "/" + "/".join(map(str, error.absolute_path))
            raise ValueError(f"{where}: {error.message}")
        return value

    class Answer:
        @classmethod
        def __get_pydantic_core_schema__(cls, source, handler):
            return core_schema.no_info_plain_validator_function(check)

        @classmethod
        def __get_pydantic_json_schema__(cls, core, handler):
            return dict(schema)

    return Answer
