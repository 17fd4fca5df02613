"""The local decoder's pure parts: telling a reply that has run away from one that has not."""

from jsonagent.models.decoding import PERIOD, RUNAWAY, runaway

CYCLE = [8, 6, 2, 8, 0, 3, 4, 8, 2, 5, 3, 4, 2, 1, 1, 7, 6, 8, 8, 9, 9]
"""The digit tokens of `862803482534211768899`, the turn the 1.5B model's 50th Fibonacci
number fell into."""


def test_a_reply_repeating_one_short_pattern_has_run_away():
    assert runaway([9] * RUNAWAY)
    assert runaway([0, 11] * (RUNAWAY // 2))
    assert runaway(list(range(100, 190)) + CYCLE * 4)  # after a start of its own
    assert runaway(list(range(PERIOD)) * 3)


def test_a_reply_that_varies_has_not():
    assert not runaway([9] * (RUNAWAY - 1))  # too short to tell
    assert not runaway(list(range(300)))
    assert not runaway(list(range(100, 190)) + CYCLE * 2)  # 42 tokens of the turn, not 64
    assert not runaway(list(range(PERIOD + 1)) * 3)  # a pattern longer than PERIOD
