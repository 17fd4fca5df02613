"""The statistics of an eval, as pure functions: no I/O, no state, standard library only.

Every random draw comes from a `random.Random(seed)`, so the same results give the same
numbers every time.
"""

from __future__ import annotations

import math
import random
from itertools import product
from statistics import fmean, median
from typing import Sequence

Z95 = 1.959963984540054
"""The normal quantile of a two-sided 95% interval."""

EXACT_UP_TO = 16
"""Up to this many cases the permutation test enumerates every sign pattern (2^16)."""


def wilson(passed: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate: sane at 0 of n and n of n, unlike the
    normal one. (0, 1) when there is nothing to estimate from. `passed` may be fractional:
    cases that passed in some of their repeats count their share."""
    if n <= 0:
        return 0.0, 1.0
    p = passed / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # at 0 or n the interval touches the edge exactly, not a rounding error away from it
    return (0.0 if passed == 0 else max(0.0, centre - margin),
            1.0 if passed == n else min(1.0, centre + margin))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k runs passes, from n runs of which c passed: the
    unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k)."""
    if not 0 < k <= n:
        raise ValueError(f"k must be in 1..{n}, not {k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The chance that all of k runs pass (pass^k), unbiased: C(c, k) / C(n, k)."""
    if not 0 < k <= n:
        raise ValueError(f"k must be in 1..{n}, not {k}")
    return math.comb(c, k) / math.comb(n, k)


def mcnemar(b: int, c: int) -> float:
    """The exact McNemar test: b cases pass only in one variant, c only in the other. Under
    no difference each discordant case goes either way with chance 1/2, so the two-sided p
    is twice the binomial tail of the smaller count, capped at 1."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def permutation_p(differences: Sequence[float], rounds: int = 10_000, seed: int = 0) -> float:
    """Two-sided paired permutation test of a mean difference of zero: each case's
    difference may have gone either way, so its sign is flipped at random. Exact (every
    sign pattern) up to EXACT_UP_TO cases."""
    diffs = [d for d in differences if d != 0]
    if not diffs:
        return 1.0
    observed = abs(sum(diffs)) - 1e-12  # a sum equal to the observed one counts as extreme
    if len(diffs) <= EXACT_UP_TO:
        patterns = list(product((1, -1), repeat=len(diffs)))
        extreme = sum(abs(sum(s * d for s, d in zip(signs, diffs))) >= observed
                      for signs in patterns)
        return extreme / len(patterns)
    rng = random.Random(seed)
    extreme = sum(abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed
                  for _ in range(rounds))
    return (extreme + 1) / (rounds + 1)


def bootstrap_interval(differences: Sequence[float], rounds: int = 2_000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of paired differences (cases resampled
    with replacement)."""
    if not differences:
        return 0.0, 0.0
    rng = random.Random(seed)
    n = len(differences)
    means = sorted(fmean(rng.choices(differences, k=n)) for _ in range(rounds))
    cut = (1 - level) / 2
    return means[int(cut * rounds)], means[min(rounds - 1, int((1 - cut) * rounds))]


def middle(values: Sequence[float]) -> float | None:
    """The median, or None for no values."""
    return median(values) if values else None


def mean(values: Sequence[float]) -> float | None:
    return fmean(values) if values else None


def verdict(a: str, b: str, b_only: int, a_only: int, cases: int, p: float) -> str:
    """One sentence on a paired comparison of pass/fail: which way, how many, and whether it
    is more than noise."""
    if b_only == a_only == 0:
        return f"{a} and {b} pass and fail the same {cases} cases: p = 1"
    if p < 0.05:
        return (f"{b} passes {b_only} case{'s' * (b_only != 1)} that {a} fails and fails "
                f"{a_only} that {a} passes: p = {p:.3g}")
    return (f"the difference is within the noise, p = {p:.2g}: of {cases} "
            f"case{'s' * (cases != 1)}, {b} passes {b_only} that {a} fails, and {a} passes "
            f"{a_only} that {b} fails")
