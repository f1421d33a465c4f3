"""When a difference in time is a result and when it is noise.

A benchmark case run with --benchmark_repetitions=N carries the median of its N wall-clock times
and their standard deviation s (results.Benchmark). The rule, for "a takes less time than
factor x b" (factor 1: a is faster; 1.3: a costs at most 30% more):

    resolved  when  |factor*t_b - t_a| > K * sqrt(s_a^2 + (factor*s_b)^2),  K = 2,
              and both cases have at least MIN_REPETITIONS repetitions;
    otherwise "not resolved at this noise".

s is the spread of one repetition, not the standard error of the median: the repetitions of a case
run back to back, so a change of load between two cases (the usual noise on a shared machine) is
not averaged away, and the rule stays conservative. K = 2: a difference of two standard deviations
of the difference of two normal measurements happens by chance about 5% of the time. A case run
once has no measured spread, so no time comparison with it is resolved.

Memory figures are exact (the same allocation sequence every run) and need no such rule.
"""
from __future__ import annotations

import math

from .results import Benchmark

K = 2.0
MIN_REPETITIONS = 3
NOT_RESOLVED = "not resolved at this noise"


def spread_ms(b: Benchmark) -> float | None:
    """The case's standard deviation over its repetitions, None if it has too few to say."""
    if b.repetitions < MIN_REPETITIONS or b.time_stddev_ms is None:
        return None
    return b.time_stddev_ms


def is_less(a: Benchmark, b: Benchmark, factor: float = 1.0) -> bool | None:
    """Whether a's time is below factor x b's: True or False when the gap is beyond the noise (the
    rule above), None when it is not resolved."""
    sa, sb = spread_ms(a), spread_ms(b)
    if sa is None or sb is None:
        return None
    gap = factor * b.real_time_ms - a.real_time_ms
    if abs(gap) <= K * math.sqrt(sa ** 2 + (factor * sb) ** 2):
        return None
    return gap > 0


def ordering(a: Benchmark, b: Benchmark) -> str:
    """a against b in words: "faster", "slower" or NOT_RESOLVED."""
    less = is_less(a, b)
    return NOT_RESOLVED if less is None else ("faster" if less else "slower")


def why_unresolved(*cases: Benchmark) -> str:
    """Why a comparison of these cases could not be resolved, for the report's text."""
    few = [c for c in cases if spread_ms(c) is None]
    if few:
        return (f"{NOT_RESOLVED}: {few[0].repetitions} repetition(s) of {few[0].name}, fewer than the "
                f"{MIN_REPETITIONS} a spread needs")
    return f"{NOT_RESOLVED}: the difference is within {K:g} standard deviations of the repetitions"
