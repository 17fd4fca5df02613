"""An LLM judge: a jsonagent run of its own, with no tools but the task-complete one and a
typed answer, `Verdict`. So the envelope, its re-asks and the schema are the product's
own; a judge whose reply never validates ends its run failed, and its score is an error,
never a pass."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from string import Template
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from ..notes import template
from ..status import COMPLETED
from .evaluators import Evaluator, answer_text


class Verdict(BaseModel):
    """The judge's verdict on the answer."""

    score: float = Field(ge=0.0, le=1.0, description="0: fails the rubric, 1: meets it fully")
    reason: str = Field(description="Why, in one or two sentences")


class JudgeFailed(Exception):
    pass


@functools.lru_cache(maxsize=4)
def _resolved(spec: str):
    """One model per judge in each worker: a local model loads once, not once a run."""
    from ..models import resolve_model

    return resolve_model(spec)


@dataclass
class Judge(Evaluator):
    rubric: str
    model: Any = None
    """A --model name or a Model; None takes the model of the run it judges."""
    threshold: float = 0.5
    max_steps: int = 2
    name: str | None = None
    kind: ClassVar[str] = "judge"

    def check(self, case, outcome):
        from ..agent import Agent

        if outcome.answer is None:  # nothing to judge: no call spent on it
            return 0.0, f"no answer: the run ended {outcome.result.status}"
        # no model anywhere: Agent takes $JSONAGENT_MODEL, or says there is none
        model = self.model if self.model is not None else outcome.model
        expected = getattr(case, "expected", None)
        prompt = Template(template("judge.md")).substitute(
            rubric=self.rubric.strip(), question=getattr(case, "input", ""),
            expected_block="" if expected is None else
            f"A right answer, for reference:\n{answer_text(expected)}\n",
            answer=answer_text(outcome.answer))
        if isinstance(model, str):
            model = _resolved(model)
        with Agent(model=model, tools=[], output_type=Verdict, max_steps=self.max_steps) as judge:
            result = judge.run(prompt)
        if result.status != COMPLETED:
            raise JudgeFailed(f"the judge gave no valid verdict ({result.status}: "
                              f"{result.error})")
        verdict = result.answer
        return verdict.score, verdict.reason

