"""What an eval's results say: per variant the pass rate with its interval, pass@k and pass^k,
medians and mean scores; between two variants (or two results files) the cases that flipped
and whether the difference is more than noise.

Runs that ended on an error of the eval itself (the model endpoint failed, an evaluator
could not score) are counted apart and left out of every rate. Repeats of a case are never
independent cases: paired tests aggregate each case first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EvalError
from . import stats

PASS, FAIL, ERROR = "pass", "fail", "error"


@dataclass
class Run:
    """One line of the results file, as the report reads it."""

    variant: str
    case: str
    repeat: int
    verdict: str
    status: str
    answer: Any = None
    why: str | None = None
    """What went wrong for an error (or why the run failed)."""
    scores: list[dict] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    tokens: int = 0
    cost: float | None = None
    """In US dollars; None when unknown (see usage.Usage.cost)."""
    model: str | None = None
    sampling: dict | None = None
    trace: list[dict] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    dataset: str | None = None
    """The hash of the dataset the run was of."""

    @classmethod
    def of(cls, line: dict) -> Run:
        extra, usage = line.get("extra") or {}, line.get("usage") or {}
        return cls(variant=extra["variant"], case=extra["case"], repeat=extra.get("repeat", 0),
                   # no verdict: the run's worker died, nothing was scored
                   verdict=extra.get("verdict", ERROR), status=line["status"],
                   answer=line.get("answer"),
                   why=extra.get("why") or line.get("error"), scores=extra.get("scores", []),
                   steps=line.get("steps", 0), seconds=line.get("seconds", 0.0),
                   tokens=usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
                   cost=usage.get("cost"),
                   model=extra.get("model"), sampling=extra.get("sampling"),
                   trace=extra.get("trace", []), tags=extra.get("tags", []),
                   dataset=extra.get("dataset"))


_NONE, _NUMBER = type(None), (int, float)
_FIELDS = {  # what Run.of, the summaries and the HTML report read of a line, and their types
    "": {"status": (str,), "steps": (int,), "seconds": _NUMBER, "usage": (dict, _NONE),
         "error": (str, _NONE)},
    "extra.": {"variant": (str,), "case": (str,), "repeat": (int,), "verdict": (str,),
               "why": (str, _NONE), "scores": (list,), "model": (str, _NONE),
               "sampling": (dict, _NONE), "trace": (list,), "tags": (list,),
               "dataset": (str, _NONE), "once": (list, _NONE)},
    "usage.": {"prompt_tokens": (int,), "completion_tokens": (int,), "cost": (*_NUMBER, _NONE)},
}
_REQUIRED = {"status", "extra.variant", "extra.case"}
_ITEMS = {"scores": dict, "trace": dict, "tags": str, "once": dict}


def line_problem(line: dict) -> str | None:
    """What keeps a results line from being read as a run of an eval (a file edited by hand,
    or damaged), said for its reader to find; None when it can be."""
    extra = line.get("extra")
    if not isinstance(extra, dict):
        return "not the results of an eval: the line has no \"extra\" object"
    for where, data in (("", line), ("extra.", extra), ("usage.", line.get("usage") or {})):
        for name, types in _FIELDS[where].items():
            if name not in data:
                if where + name in _REQUIRED:
                    return f"not the results of an eval: {where}{name} is missing"
            elif not isinstance(data[name], types):
                return f"{where}{name} is {_short(data[name])}, not {_kinds(types)}"
    for name, kind in _ITEMS.items():
        for i, item in enumerate(extra.get(name) or ()):
            if not isinstance(item, kind):
                return f"extra.{name}[{i}] is {_short(item)}, not {_kinds((kind,))}"
    for i, score in enumerate(extra.get("scores", ())):
        if not isinstance(score.get("name"), str) or not isinstance(score.get("score"), _NUMBER):
            return f"extra.scores[{i}] is {_short(score)}, not a score (a name and a number)"
    if extra.get("verdict", ERROR) not in (PASS, FAIL, ERROR):
        return f"extra.verdict is {_short(extra['verdict'])}, not pass, fail or error"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _kinds(types: tuple) -> str:
    names = {str: "a string", int: "an integer", float: "a number", dict: "an object",
             list: "a list", _NONE: "null"}
    return " or ".join(dict.fromkeys(names[t] for t in types if not (t is int and float in types)))


@dataclass
class Summary:
    variant: str
    model: str | None
    sampling: dict | None
    """The sampling settings its first model call sent (None: the backend does not say)."""
    runs: int
    passed: int
    failed: int
    errors: int
    rate: float | None
    """passed / (passed + failed): errors are left out."""
    low: float
    high: float
    """The rate's 95% Wilson interval, over cases: with repeats, each case counts the share
    of its runs that passed (the repeats of one case are not independent runs)."""
    repeats: int
    pass_at: dict[int, float]
    """pass@k for k = 1..repeats, averaged over the cases (with repeats)."""
    pass_hat: dict[int, float]
    median_steps: float | None
    median_seconds: float | None
    median_tokens: float | None
    cost: float | None
    """What all its runs cost, errors too (they were paid for); None when one's is unknown."""
    scores: dict[str, float]
    """Mean score per evaluator (a pass/fail one's is its pass rate), errors left out."""


@dataclass
class Comparison:
    a: str
    b: str
    cases: int
    """Cases with a scored run in both."""
    a_only: list[str]
    """Cases that pass (more often) in a than in b: b's regressions."""
    b_only: list[str]
    p: float
    test: str
    """mcnemar (one run a case) or permutation (the per-case pass rates, with repeats)."""
    delta: float
    """b's pass rate minus a's, over the shared cases."""
    sentence: str
    scores: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Per scored evaluator: a's mean, b's mean, the paired permutation p."""

    @property
    def worse(self) -> bool:
        """b is significantly worse than a."""
        return self.p < 0.05 and self.delta < 0


class Report:
    """The runs of an eval. `variants` and `cases` give their order (a dataset's); by default
    the order they first appear in, since workers finish in any order. The first variant is
    the one the others are compared with."""

    def __init__(self, runs: list[Run], source: str = "", variants: list[str] | None = None,
                 cases: list[str] | None = None):
        self.source = source
        self.variants = list(dict.fromkeys([*(variants or []), *(r.variant for r in runs)]))
        self.cases = list(dict.fromkeys([*(cases or []), *(r.case for r in runs)]))
        v, c = {n: i for i, n in enumerate(self.variants)}, {n: i for i, n in enumerate(self.cases)}
        self.runs = sorted(runs, key=lambda r: (v[r.variant], c[r.case], r.repeat))
        present = {r.variant for r in runs}, {r.case for r in runs}
        self.variants = [n for n in self.variants if n in present[0]]
        self.cases = [n for n in self.cases if n in present[1]]

    @classmethod
    def from_lines(cls, lines: list[dict], source: str = "", **order) -> Report:
        try:
            return cls([Run.of(line) for line in lines], source, **order)
        except (KeyError, TypeError):
            raise EvalError(f"{source or 'results'}: not the results of an eval") from None

    @classmethod
    def from_file(cls, path: str | Path) -> Report:
        from ..batch import BatchError, read_results

        try:
            lines = read_results(path, line_problem)
        except BatchError as exc:
            raise EvalError(str(exc)) from None
        if not lines and not Path(path).exists():
            raise EvalError(f"{path}: no such results file")
        return cls.from_lines(lines, str(path))

    @property
    def datasets(self) -> list[str]:
        """The hashes of the datasets its runs were of (one, for a file of one eval)."""
        return sorted({r.dataset for r in self.runs if r.dataset})

    def of(self, variant: str) -> list[Run]:
        return [r for r in self.runs if r.variant == variant]

    def per_case(self, variant: str) -> dict[str, tuple[int, int]]:
        """case -> (passed, scored runs), errors left out."""
        out: dict[str, tuple[int, int]] = {}
        for r in self.of(variant):
            if r.verdict != ERROR:
                p, n = out.get(r.case, (0, 0))
                out[r.case] = (p + (r.verdict == PASS), n + 1)
        return out

    def summary(self, variant: str) -> Summary:
        runs = self.of(variant)
        passed = sum(r.verdict == PASS for r in runs)
        failed = sum(r.verdict == FAIL for r in runs)
        repeats = max((r.repeat for r in runs), default=0) + 1
        # a case's repeats are not independent runs: the sample is the cases, each counting
        # the share of its runs that passed (with one run a case, the runs themselves)
        rates = [p / n for p, n in self.per_case(variant).values() if n]
        low, high = stats.wilson(sum(rates), len(rates))
        cases = [c for c in self.per_case(variant).values() if c[1] == repeats]
        ks = range(1, repeats + 1) if repeats > 1 and cases else ()
        scored = [r for r in runs if r.verdict != ERROR]
        means: dict[str, list[float]] = {}
        for r in scored:
            for s in r.scores:
                means.setdefault(s["name"], []).append(s["score"])
        return Summary(
            variant=variant, model=next((r.model for r in runs if r.model), None),
            sampling=next((r.sampling for r in runs if r.sampling), None),
            runs=len(runs), passed=passed, failed=failed, errors=len(runs) - passed - failed,
            rate=passed / (passed + failed) if passed + failed else None, low=low, high=high,
            repeats=repeats,
            pass_at={k: stats.mean([stats.pass_at_k(n, c, k) for c, n in cases]) for k in ks},
            pass_hat={k: stats.mean([stats.pass_hat_k(n, c, k) for c, n in cases]) for k in ks},
            median_steps=stats.middle([r.steps for r in scored]),
            median_seconds=stats.middle([r.seconds for r in scored]),
            median_tokens=stats.middle([r.tokens for r in scored]),
            cost=None if any(r.cost is None for r in runs) else sum(r.cost for r in runs),
            scores={k: stats.mean(v) for k, v in means.items()})

    def by_tag(self, variant: str) -> dict[str, tuple[int, int]]:
        """tag -> (passed, scored runs) over the variant's runs of the cases with that tag."""
        out: dict[str, tuple[int, int]] = {}
        for r in self.of(variant):
            if r.verdict != ERROR:
                for tag in r.tags:
                    p, n = out.get(tag, (0, 0))
                    out[tag] = (p + (r.verdict == PASS), n + 1)
        return dict(sorted(out.items()))

    def summaries(self) -> list[Summary]:
        return [self.summary(v) for v in self.variants]

    def compare(self, a: str, b: str, other: Report | None = None,
                labels: tuple[str, str] | None = None) -> Comparison:
        """Variant `a` of this report against variant `b` (of `other`, when given), named
        `labels` in the sentence (default: a and b)."""
        other = other or self
        return compare_runs(self.per_case(a), other.per_case(b), *(labels or (a, b)),
                            _scores_by_case(self.of(a)), _scores_by_case(other.of(b)))


def compare_runs(a_cases: dict[str, tuple[int, int]], b_cases: dict[str, tuple[int, int]],
                 a: str, b: str, a_scores: dict | None = None,
                 b_scores: dict | None = None) -> Comparison:
    shared = [c for c in a_cases if c in b_cases]
    rate_a = {c: a_cases[c][0] / a_cases[c][1] for c in shared}
    rate_b = {c: b_cases[c][0] / b_cases[c][1] for c in shared}
    a_only = [c for c in shared if rate_a[c] > rate_b[c]]
    b_only = [c for c in shared if rate_b[c] > rate_a[c]]
    single = all(a_cases[c][1] == 1 and b_cases[c][1] == 1 for c in shared)
    if single:
        p, test = stats.mcnemar(len(b_only), len(a_only)), "mcnemar"
        sentence = stats.verdict(a, b, len(b_only), len(a_only), len(shared), p)
    else:
        diffs = [rate_b[c] - rate_a[c] for c in shared]
        p, test = stats.permutation_p(diffs), "permutation"
        low, high = stats.bootstrap_interval(diffs)
        change = stats.mean(diffs) or 0.0
        way = "the same as" if change == 0 else \
            f"{abs(change) * 100:.0f} points {'higher' if change > 0 else 'lower'} than"
        sentence = (f"{b}'s pass rate is {way} {a}'s, case by case over {len(shared)} cases "
                    f"(95% CI {low * 100:+.0f} to {high * 100:+.0f} points): p = {p:.3g}"
                    + ("" if p < 0.05 else ", within the noise"))
    delta = stats.mean([rate_b[c] - rate_a[c] for c in shared]) or 0.0
    scores = {}
    for name in sorted(set(a_scores or {}) & set(b_scores or {})):
        both = [c for c in shared if c in a_scores[name] and c in b_scores[name]]
        if both:
            diffs = [b_scores[name][c] - a_scores[name][c] for c in both]
            scores[name] = (stats.mean([a_scores[name][c] for c in both]),
                            stats.mean([b_scores[name][c] for c in both]),
                            stats.permutation_p(diffs))
    return Comparison(a, b, len(shared), a_only, b_only, p, test, delta, sentence, scores)


def _scores_by_case(runs: list[Run]) -> dict[str, dict[str, float]]:
    """evaluator -> case -> mean score over the case's scored runs."""
    sums: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        if r.verdict != ERROR:
            for s in r.scores:
                sums.setdefault(s["name"], {}).setdefault(r.case, []).append(s["score"])
    return {n: {c: sum(v) / len(v) for c, v in by.items()} for n, by in sums.items()}

