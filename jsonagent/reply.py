"""What parsing a model's reply gives: a `Step` (inside `Parsed`, with the repairs it took),
or a `ReplyProblem` the model reads on the re-ask. `envelope.parse_reply` makes them."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from string import Template
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from .notes import template
from .state import CallRecord, to_json

if TYPE_CHECKING:
    from .tools.toolset import Toolset

ENVELOPE_KEYS = ("thought", "tool_name", "args_list")


class Step(BaseModel):
    """One turn of the model: why, which tool, with what."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    thought: str
    tool_name: str
    args_list: dict[str, Any]

    def to_json(self) -> str:
        # the fields by hand: model_dump would deep-copy the arguments first
        return to_json({"thought": self.thought, "tool_name": self.tool_name,
                        "args_list": self.args_list})


class ParallelStep(BaseModel):
    """The envelope of a run that takes several calls a step; each call is a `CallEnvelope`."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    thought: str
    calls: list[dict[str, Any]]


class CallEnvelope(BaseModel):
    """One call of a `ParallelStep`, as it is validated."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    tool_name: str
    args_list: dict[str, Any]


@dataclass(slots=True)
class Parsed:
    thought: str
    calls: list[CallRecord]
    """The step's calls, in the order written: one, unless the run takes several a step. They
    are the records the run keeps of them (state.py), not done yet."""
    repairs: list[str] = field(default_factory=list)
    note: str | None = None
    """What the model must hear about its reply along with the observation (ignored actions)."""
    raw: str | None = None
    """The reply's own text when it is exactly this step as JSON (nothing repaired): the
    history keeps it byte for byte, so the prompt an endpoint already holds (the tokens it
    generated) is still the prefix of the next request. None: the step's canonical JSON."""

    @property
    def step(self) -> Step:
        """The first call as a one-call step (the only call, unless the run takes several)."""
        first = self.calls[0]
        return Step.model_construct(thought=self.thought, tool_name=first.tool,
                                    args_list=first.args)

    def to_json(self, several: bool = False) -> str:
        """The step as the history keeps it: the reply as written when it is the step
        exactly, else in the envelope the run asks for (`several`: a list of calls)."""
        if self.raw is not None:
            return self.raw
        if not several:
            first = self.calls[0]
            return to_json({"thought": self.thought, "tool_name": first.tool,
                            "args_list": first.args})
        return to_json({"thought": self.thought, "calls": [
            {"tool_name": c.tool, "args_list": c.args} for c in self.calls]})


@dataclass
class ReplyProblem:
    """Why a reply was refused; `message` is what the model reads next."""

    stage: str
    """cut | json | envelope | tool | args | calls ("cut": a reply that did not end, never read)"""
    message: str
    repairs: list[str] = field(default_factory=list)

    def for_model(self, toolset: Toolset, most: int = 1) -> str:
        """The re-ask: the problem, and the envelope to write (`most`: calls a step may
        make, when several)."""
        reask = Template(envelope_text("several" if most > 1 else "one")["reask"])
        return f"Your last reply was rejected: {self.message}\n" + reask.substitute(
            tools=", ".join(toolset.names), most=most, final=toolset.final.name)


@functools.cache
def _envelopes() -> dict[str, dict[str, str]]:
    return json.loads(template("envelopes.json"))


def envelope_text(kind: str) -> dict[str, str]:
    """What the model reads of the envelope (prompts/envelopes.json): `one` call a reply, or
    `several`: its shape (`reply`), the rule (`rule`), and the re-ask's reminder (`reask`)."""
    return _envelopes()[kind]
