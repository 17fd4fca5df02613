"""The eval statistics against known values (stats.py is pure functions)."""

import math

import pytest

from jsonagent.evals import stats
from jsonagent.evals.report import compare_runs


def test_wilson_interval_of_7_of_10():
    low, high = stats.wilson(7, 10)
    assert (round(low, 4), round(high, 4)) == (0.3968, 0.8922)


def test_wilson_interval_at_the_edges_stays_inside_0_1():
    assert stats.wilson(0, 10)[0] == 0.0 and 0.27 < stats.wilson(0, 10)[1] < 0.28
    assert stats.wilson(10, 10)[1] == 1.0 and 0.72 < stats.wilson(10, 10)[0] < 0.73
    assert stats.wilson(0, 0) == (0.0, 1.0)


def test_mcnemar_exact_against_known_tables():
    assert round(stats.mcnemar(8, 1), 4) == 0.0391
    assert stats.mcnemar(1, 8) == stats.mcnemar(8, 1)
    assert stats.mcnemar(1, 1) == 1.0
    assert stats.mcnemar(0, 0) == 1.0
    assert stats.mcnemar(5, 0) == pytest.approx(2 / 32)


def test_pass_at_k_is_the_unbiased_estimator():
    assert stats.pass_at_k(10, 0, 5) == 0.0
    assert stats.pass_at_k(10, 10, 1) == 1.0
    assert stats.pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert stats.pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))
    assert stats.pass_at_k(4, 3, 2) == 1.0  # any 2 of them hold a pass
    with pytest.raises(ValueError):
        stats.pass_at_k(3, 1, 4)


def test_pass_hat_k_is_every_one_of_k_passing():
    assert stats.pass_hat_k(5, 2, 1) == pytest.approx(0.4)
    assert stats.pass_hat_k(5, 2, 2) == pytest.approx(1 / 10)
    assert stats.pass_hat_k(5, 5, 5) == 1.0 and stats.pass_hat_k(5, 4, 5) == 0.0


def test_permutation_test_is_exact_for_few_cases_and_seeded_beyond():
    assert stats.permutation_p([1, 1, 1, 1]) == pytest.approx(2 / 16)
    assert stats.permutation_p([0, 0]) == 1.0
    assert stats.permutation_p([1, -1]) == 1.0
    many = [0.5] * 14 + [-0.5] * 6
    assert stats.permutation_p(many, seed=3) == stats.permutation_p(many, seed=3)
    assert 0.05 < stats.permutation_p(many) < 0.2


def test_bootstrap_interval_holds_the_mean_and_is_reproducible():
    diffs = [0.0, 0.5, 1.0, 0.0, 0.5, 1.0]
    low, high = stats.bootstrap_interval(diffs, seed=1)
    assert low <= 0.5 <= high and (low, high) == stats.bootstrap_interval(diffs, seed=1)


def test_the_sentence_says_which_way_and_whether_it_is_noise():
    assert stats.verdict("A", "B", 8, 1, 30, 0.039) == \
        "B passes 8 cases that A fails and fails 1 that A passes: p = 0.039"
    # it read "(lazy passes 0, good passes 2 of 3 the other fails)" (issue 58, finding 28)
    assert stats.verdict("lazy", "good", 2, 0, 3, 0.5) == (
        "the difference is within the noise, p = 0.5: of 3 cases, good passes 2 that lazy "
        "fails, and lazy passes 0 that good fails")
    assert stats.verdict("A", "B", 1, 0, 1, 1.0).startswith(
        "the difference is within the noise, p = 1: of 1 case, B passes 1")


def test_paired_comparison_aggregates_repeats_per_case_first():
    # three repeats of each of 6 cases: 18 runs, but 6 paired observations
    a = {f"c{i}": (0, 3) for i in range(6)}
    b = {f"c{i}": (3, 3) for i in range(6)}
    c = compare_runs(a, b, "A", "B")
    assert c.test == "permutation" and c.cases == 6 and c.b_only == list(a)
    assert c.p == pytest.approx(2 / 64)  # exact: only the two extreme sign patterns
    assert c.delta == 1.0 and not c.worse
    assert c.sentence == ("B's pass rate is 100 points higher than A's, case by case over 6 "
                          "cases (95% CI +100 to +100 points): p = 0.0312")
    one = compare_runs({f"c{i}": (1, 1) for i in range(9)},
                       {f"c{i}": (int(i == 0), 1) for i in range(9)}, "A", "B")
    assert one.test == "mcnemar" and one.p == pytest.approx(stats.mcnemar(0, 8)) and one.worse
