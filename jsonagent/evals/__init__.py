"""Evals: measure an agent on a dataset of cases, repeat it, compare settings side by side,
and say whether a difference is real or noise.

    from jsonagent.evals import Dataset

    dataset = Dataset.load("cases.yaml")
    report = dataset.run(lambda case, variant: Agent(model=..., tools=case.tools), repeat=3)
    print(report.summary("default").rate)

`dataset` reads and checks the cases, `evaluators`, `trajectory` and `judge` score a run,
`runner` runs the cases through the batch machinery (the results file is the checkpoint),
`stats` holds the statistics as pure functions, `report` and `html` say what it all means.
"""

from __future__ import annotations

from .case import Case, Variant, schema_type
from .dataset import Dataset
from .evaluators import (Contains, Equals, Evaluator, Fields, Number, Outcome, Python, Regex,
                         Schema, Score, SecondsAtMost, Status, StepsAtMost, TokensAtMost,
                         Trajectory)
from .judge import Judge, Verdict
from .report import Comparison, Report, Run, Summary
from .runner import run
from .trajectory import Call

__all__ = ["Call", "Case", "Comparison", "Contains", "Dataset", "Equals", "Evaluator", "Fields",
           "Judge", "Number", "Outcome", "Python", "Regex", "Report", "Run", "Schema", "Score",
           "SecondsAtMost", "Status", "StepsAtMost", "Summary", "TokensAtMost", "Trajectory",
           "Variant", "Verdict", "run", "schema_type"]
