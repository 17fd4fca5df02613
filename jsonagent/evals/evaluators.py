"""Evaluators: each reads a finished run (its `RunResult`, events and wall time) and gives
a score in [0, 1] with a reason. A pass/fail check scores 1 or 0; a scored one passes at
its `threshold`. An evaluator that cannot score (a judge whose reply never validates, a
function that raises) gives an *error*, which the eval counts apart from a failed case.

In a dataset each evaluator is a mapping whose key names its kind:

    - equals: "1024"            # after trimming; ignore_case: true
    - contains: "Paris"
    - regex: "^\\d{4}$"
    - number: 3.14              # tolerance: 0.01
    - schema: {type: object}    # the answer is valid against this JSON Schema
    - fields: {bin: R7-12}      # a typed answer, field by field
    - status: completed
    - steps_at_most: 5          # also seconds_at_most, tokens_at_most
    - trajectory: [{tool: run_python, args: {code: "print(2**10)"}}]   # mode: in_order
    - judge: "Is the answer polite and correct?"                      # model: NAME
    - python: "my_checks:is_prime"
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from ..status import COMPLETED
from .trajectory import ArgsMatch, Call, Mode
from .trajectory import score as trajectory_score

if TYPE_CHECKING:
    from ..result import RunResult


@dataclass
class Score:
    name: str
    score: float
    passed: bool
    reason: str = ""
    error: str | None = None
    """The evaluator could not score the run: an error of the eval, never a failed case."""


@dataclass
class Outcome:
    """What evaluators read about one run."""

    result: RunResult
    events: list = field(default_factory=list)
    seconds: float = 0.0
    final_tool: str = "TaskCompleteTool"
    model: Any = None
    """The model the run used (a --model name or a Model), for a judge that names none."""

    @property
    def answer(self) -> Any:
        return self.result.answer if self.result.status == COMPLETED else None

    def calls(self) -> list[tuple[str, dict]]:
        """The tool calls the run made, in order; the task-complete call is the answer."""
        return [(c.tool, c.args) for s in self.result.steps for c in s.calls
                if c.tool != self.final_tool]


def answer_text(answer: Any) -> str:
    if isinstance(answer, str):
        return answer
    if hasattr(answer, "model_dump"):
        answer = answer.model_dump(mode="json")
    return json.dumps(answer, ensure_ascii=False, sort_keys=True)


def answer_data(answer: Any) -> Any:
    if hasattr(answer, "model_dump"):
        return answer.model_dump(mode="json")
    from ..events import jsonable

    return jsonable(answer)


class Evaluator:
    """The base of every evaluator: `check` returns a bool, a score, or (score, reason)."""

    kind: ClassVar[str] = ""
    threshold: float = 1.0

    @property
    def label(self) -> str:
        return getattr(self, "name", None) or self.kind

    def check(self, case: Any, outcome: Outcome) -> bool | float | tuple[float, str]:
        raise NotImplementedError

    def evaluate(self, case: Any, outcome: Outcome) -> Score:
        try:
            return as_score(self.label, self.check(case, outcome), self.threshold)
        except Exception as exc:  # an evaluator's failure is the eval's, not the run's
            return Score(self.label, 0.0, False, error=f"{type(exc).__name__}: {exc}")


def as_score(name: str, value: Any, threshold: float = 1.0) -> Score:
    reason = ""
    if isinstance(value, tuple) and len(value) == 2:
        value, reason = value
    if isinstance(value, bool):
        return Score(name, float(value), value, str(reason or ""))
    if isinstance(value, (int, float)) and 0.0 <= float(value) <= 1.0:
        return Score(name, float(value), float(value) >= threshold, str(reason or ""))
    raise ValueError(f"an evaluator returns a bool, a score in [0, 1] or (score, reason), "
                     f"not {value!r}")


def _no_answer(outcome: Outcome) -> tuple[bool, str]:
    return False, f"no answer: the run ended {outcome.result.status}"


# -- the answer ------------------------------------------------------------------------------

@dataclass
class Equals(Evaluator):
    value: Any
    ignore_case: bool = False
    name: str | None = None
    kind: ClassVar[str] = "equals"

    def check(self, case, outcome):
        if outcome.answer is None:
            return _no_answer(outcome)
        if not isinstance(self.value, str):
            got = answer_data(outcome.answer)
            return got == self.value, f"expected {self.value!r}, got {got!r}"
        got, want = answer_text(outcome.answer).strip(), self.value.strip()
        if self.ignore_case:
            got, want = got.casefold(), want.casefold()
        return got == want, f"expected {self.value.strip()!r}, got {_short(got)!r}"


@dataclass
class Contains(Evaluator):
    """The answer contains the text, or any one of a list of texts."""

    value: str | list[str]
    ignore_case: bool = False
    name: str | None = None
    kind: ClassVar[str] = "contains"

    def check(self, case, outcome):
        if outcome.answer is None:
            return _no_answer(outcome)
        text = answer_text(outcome.answer)
        fold = str.casefold if self.ignore_case else str
        options = [self.value] if isinstance(self.value, str) else self.value
        found = next((o for o in options if fold(o) in fold(text)), None)
        if found is not None:
            return True, f"found {found!r} in {_short(text)!r}"
        return False, f"no {' or '.join(map(repr, options))} in {_short(text)!r}"


@dataclass
class Regex(Evaluator):
    pattern: str
    ignore_case: bool = False
    name: str | None = None
    kind: ClassVar[str] = "regex"

    def check(self, case, outcome):
        if outcome.answer is None:
            return _no_answer(outcome)
        text = answer_text(outcome.answer)
        found = re.search(self.pattern, text, re.IGNORECASE if self.ignore_case else 0)
        return bool(found), f"/{self.pattern}/ {'matches' if found else 'does not match'} " \
            f"{_short(text)!r}"


@dataclass
class Number(Evaluator):
    value: float
    tolerance: float = 0.0
    name: str | None = None
    kind: ClassVar[str] = "number"

    def check(self, case, outcome):
        if outcome.answer is None:
            return _no_answer(outcome)
        answer = outcome.answer
        found = [float(answer)] if isinstance(answer, (int, float)) and \
            not isinstance(answer, bool) else numbers_in(answer_text(answer))
        for n in found:
            if math.isclose(n, self.value, rel_tol=0, abs_tol=self.tolerance):
                return True, f"{n:g} is within {self.tolerance:g} of {self.value:g}"
        return False, f"no number within {self.tolerance:g} of {self.value:g} in " \
            f"{_short(answer_text(answer))!r}"


def numbers_in(text: str) -> list[float]:
    """Every number written in the text; thousands separators allowed (1,024 is 1024)."""
    cleaned = re.sub(r"(?<=\d)[,_\u202f](?=\d{3}\b)", "", text)
    return [float(m) for m in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", cleaned)]


@dataclass
class Schema(Evaluator):
    schema: dict
    name: str | None = None
    kind: ClassVar[str] = "schema"

    def check(self, case, outcome):
        import jsonschema

        from ..tools.schema import AUTHORED, schema_problem, validator

        if outcome.answer is None:
            return _no_answer(outcome)
        # a dataset's is checked as it loads; one built in Python is checked here, before
        # its refs could be followed (none is ever read or fetched)
        problem = schema_problem(self.schema, AUTHORED)
        if problem is not None:
            return False, f"the schema is refused: {problem}"
        data = answer_data(outcome.answer)
        if isinstance(data, str) and data.strip()[:1] in ("{", "["):
            try:
                data = json.loads(data)
            except json.JSONDecodeError:
                pass
        error = jsonschema.exceptions.best_match(validator(self.schema).iter_errors(data))
        if error is None:
            return True, "valid against the schema"
        where = "/" + "/".join(map(str, error.absolute_path))
        return False, f"{where}: {error.message}"


@dataclass
class Fields(Evaluator):
    value: dict
    name: str | None = None
    kind: ClassVar[str] = "fields"

    def check(self, case, outcome):
        if outcome.answer is None:
            return _no_answer(outcome)
        data = answer_data(outcome.answer)
        if not isinstance(data, dict):
            return False, f"the answer is not an object: {_short(answer_text(data))!r}"
        wrong = [k for k, v in self.value.items() if data.get(k) != v]
        if not wrong:
            return 1.0, f"the {len(self.value)} fields are equal"
        k = wrong[0]
        return (1 - len(wrong) / len(self.value),
                f"{len(wrong)} of {len(self.value)} fields differ; {k}: expected "
                f"{self.value[k]!r}, got {data.get(k)!r}")


# -- the run ---------------------------------------------------------------------------------

@dataclass
class Status(Evaluator):
    value: str = COMPLETED
    name: str | None = None
    kind: ClassVar[str] = "status"

    def check(self, case, outcome):
        got = outcome.result.status
        why = f": {outcome.result.error}" if outcome.result.error and got != self.value else ""
        return got == self.value, f"ended {got}{why}"


@dataclass
class StepsAtMost(Evaluator):
    value: int
    name: str | None = None
    kind: ClassVar[str] = "steps_at_most"

    def check(self, case, outcome):
        n = len(outcome.result.steps)
        return n <= self.value, f"{n} steps (at most {self.value})"


@dataclass
class SecondsAtMost(Evaluator):
    value: float
    name: str | None = None
    kind: ClassVar[str] = "seconds_at_most"

    def check(self, case, outcome):
        return outcome.seconds <= self.value, f"{outcome.seconds:.2f} s (at most {self.value:g})"


@dataclass
class TokensAtMost(Evaluator):
    value: int
    name: str | None = None
    kind: ClassVar[str] = "tokens_at_most"

    def check(self, case, outcome):
        usage = outcome.result.usage
        n = usage.prompt_tokens + usage.completion_tokens
        return n <= self.value, f"{n} tokens (at most {self.value})"


@dataclass
class Trajectory(Evaluator):
    calls: list[Call]
    mode: Mode = "in_order"
    args_match: ArgsMatch = "partial"
    threshold: float = 1.0
    name: str | None = None
    kind: ClassVar[str] = "trajectory"

    def __post_init__(self):
        self.calls = [c if isinstance(c, Call) else Call(**c) for c in self.calls]

    def check(self, case, outcome):
        return trajectory_score(self.calls, outcome.calls(), self.mode, self.args_match)


# -- yours -----------------------------------------------------------------------------------

@dataclass
class Python(Evaluator):
    """`module:function` (or the function itself): `(case, result) -> bool | float |
    (score, reason)`, `result` being the run's RunResult."""

    function: str | Callable[[Any, Any], Any]
    threshold: float = 1.0
    name: str | None = None
    base: str | None = None
    """A folder to import the module from too (a dataset's own), in whichever process."""
    kind: ClassVar[str] = "python"

    @property
    def label(self) -> str:
        fn = self.function
        return self.name or (fn if isinstance(fn, str) else getattr(fn, "__name__", "python"))

    def check(self, case, outcome):
        return self.resolve()(case, outcome.result)

    def resolve(self) -> Callable[[Any, Any], Any]:
        if callable(self.function):
            return self.function
        import importlib
        import sys

        if self.base and self.base not in sys.path:  # last, so it never shadows a package
            sys.path.append(self.base)
        module, _, attr = self.function.partition(":")
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


def evaluator(value: Any) -> Evaluator:
    """An item of a case's or a dataset's `evaluators` built in Python: an Evaluator, or a
    plain function, called as Python's is, `(case, result) -> bool | float | (score,
    reason)`; anything else is refused as the Case is built, not when the eval runs."""
    if isinstance(value, Evaluator):
        return value
    if isinstance(value, type):
        raise ValueError(f"{value.__name__} is a class: an evaluator is an instance of one, "
                         f"{value.__name__}(...)")
    if callable(value):
        return Python(value)
    raise ValueError(f"{value!r} is not an evaluator: give an Evaluator (Equals(...), "
                     f"Python(...)) or a function (case, result) -> bool | float | "
                     f"(score, reason)")


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
