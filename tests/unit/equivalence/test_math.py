"""The equivalence formulas against hand-computed cases: the KL lower bound with its merged
"other" bucket, top-1 agreement, the scored token's figures, greedy paths, flips and McNemar,
and bootstrap intervals (the all-zero A/A floor included)."""

from __future__ import annotations

import math

import pytest

from pytest_vllmqual.equivalence.answers import GreedyStep, compare_paths, count_flips
from pytest_vllmqual.equivalence.intervals import ratio_interval, unit_interval
from pytest_vllmqual.equivalence.paired import mcnemar_exact
from pytest_vllmqual.equivalence.position import (
    EPSILON,
    Position,
    compare_position,
    kl_lower_bound,
    top_token,
)
from pytest_vllmqual.records import Divergence

ln = math.log


def test_kl_lower_bound_merges_the_rest_into_one_bucket() -> None:
    # R: token 1 at 0.5, token 2 at 0.3 (other 0.2); C: token 1 at 0.4, token 2 at 0.4 (other 0.2).
    control = Position(1, ln(0.5), {1: ln(0.5), 2: ln(0.3)})
    candidate = Position(1, ln(0.4), {1: ln(0.4), 2: ln(0.4)})
    kl, coverage = kl_lower_bound(control, candidate)
    expected = 0.5 * ln(0.5 / 0.4) + 0.3 * ln(0.3 / 0.4) + 0.2 * ln(0.2 / 0.2)
    assert kl == pytest.approx(expected, abs=1e-12)
    assert coverage == pytest.approx(0.8)


def test_the_bound_never_exceeds_the_full_kl() -> None:
    """Merging the tail into one bucket can only lower KL: full KL over 4 tokens ≥ the top-2 bound."""
    p = [0.5, 0.3, 0.15, 0.05]
    q = [0.4, 0.4, 0.05, 0.15]
    full = sum(a * ln(a / b) for a, b in zip(p, q, strict=True))
    control = Position(0, ln(p[0]), {0: ln(p[0]), 1: ln(p[1])})
    candidate = Position(0, ln(q[0]), {0: ln(q[0]), 1: ln(q[1])})
    kl, _ = kl_lower_bound(control, candidate)
    assert 0 < kl <= full


def test_a_top_k_list_missing_the_other_arms_top_token() -> None:
    """R's top token 7 is not in C's top-K: it falls into the merged bucket, and top-1 disagrees."""
    control = Position(3, ln(0.2), {7: ln(0.6), 3: ln(0.2)})
    candidate = Position(3, ln(0.3), {5: ln(0.5), 3: ln(0.3)})
    kl, coverage = kl_lower_bound(control, candidate)
    # I = {3} (the scored token, returned by both); P* = 0.8, Q* = 0.7.
    assert kl == pytest.approx(0.2 * ln(0.2 / 0.3) + 0.8 * ln(0.8 / 0.7), abs=1e-12)
    assert coverage == pytest.approx(0.2)
    figures = compare_position(control, candidate)
    assert figures.top1_agrees is False
    assert figures.ln_ratio == pytest.approx(ln(0.2) - ln(0.3))
    assert figures.delta_p == pytest.approx(0.1)


def test_the_other_bucket_is_floored_at_epsilon() -> None:
    """The candidate puts all its mass on the shared tokens (Q* rounds to 0): floored, finite."""
    control = Position(1, ln(0.9), {1: ln(0.9)})
    candidate = Position(1, 0.0, {1: 0.0})
    kl, _ = kl_lower_bound(control, candidate)
    assert kl == pytest.approx(0.9 * ln(0.9) + 0.1 * ln(0.1 / EPSILON), abs=1e-9)


def test_identical_answers_are_zero_and_agree() -> None:
    control = Position(4, ln(0.25), {4: ln(0.25), 9: ln(0.7)})
    figures = compare_position(control, control)
    assert (figures.kl, figures.ln_ratio, figures.delta_p, figures.top1_agrees) == (0.0, 0.0, 0.0, True)
    assert top_token({}) is None and top_token({2: -1.0, 1: -1.0}) == 1


def _path(tokens: list[int], tops: list[dict[int, float]] | None = None) -> list[GreedyStep]:
    return [GreedyStep(t, (tops or [{}] * len(tokens))[i] or {t: 0.0}) for i, t in enumerate(tokens)]


def test_greedy_identical_is_censored_at_max_tokens() -> None:
    result = compare_paths(_path([1, 2, 3]), _path([1, 2, 3]), max_tokens=16)
    assert (result.kind, result.position, result.length) == (Divergence.IDENTICAL, None, 16)


def test_greedy_near_tie_and_hard_divergence() -> None:
    control_top = {5: -0.6, 6: -0.9, 8: -3.0}
    control = _path([1, 5], [{1: -0.1}, control_top])
    near = compare_paths(control, _path([1, 6]), max_tokens=8)
    assert (near.kind, near.position) == (Divergence.NEAR_TIE, 1)
    far = compare_paths(control, _path([1, 8]), max_tokens=8)
    assert far.kind is Divergence.HARD  # in the top-K, but 2.4 nats below the top
    absent = compare_paths(control, _path([1, 42]), max_tokens=8)
    assert absent.kind is Divergence.HARD
    shorter = compare_paths(control, _path([1]), max_tokens=8)
    assert (shorter.kind, shorter.position) == (Divergence.HARD, 1)


def test_flips_and_exact_mcnemar() -> None:
    pairs = [(True, False)] * 3 + [(False, True)] * 1 + [(True, True)] * 6
    count = count_flips(pairs)
    assert (count.n, count.b, count.c) == (10, 3, 1)
    assert count.flips == pytest.approx(0.4) and count.delta_accuracy == pytest.approx(-0.2)
    # two-sided binomial of 3 of 4 at 0.5: P(X<=1)+P(X>=3) = (1+4+4+1)/16
    assert count.p_value == pytest.approx(10 / 16)


def test_zero_flips_is_p_one_not_an_error() -> None:
    count = count_flips([(True, True), (False, False)])
    assert (count.b, count.c, count.flips, count.p_value) == (0, 0, 0.0, 1.0)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)


def test_an_all_zero_floor_has_a_point_interval() -> None:
    interval = ratio_interval([0.0] * 8, [512.0] * 8)
    assert (interval.point, interval.low, interval.high, interval.units) == (0.0, 0.0, 0.0, 8)


def test_one_unit_has_no_interval() -> None:
    interval = ratio_interval([3.0], [4.0])
    assert interval.point == 0.75 and interval.low is None and interval.high is None


def test_bootstrap_resamples_units_and_brackets_the_point() -> None:
    numerators = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    interval = ratio_interval(numerators, [10.0] * 8)
    assert interval.point == pytest.approx(0.45)
    assert interval.low is not None and interval.high is not None
    assert interval.low < 0.45 < interval.high
    assert interval.low > 0.2 and interval.high < 0.7
    again = ratio_interval(numerators, [10.0] * 8)
    assert (again.low, again.high) == (interval.low, interval.high)  # a fixed seed


def test_unit_interval_of_a_derived_statistic() -> None:
    def rms(squares: object, counts: object, axis: int = -1) -> object:
        return (squares.sum(axis=axis) / counts.sum(axis=axis)) ** 0.5  # type: ignore[attr-defined]
    interval = unit_interval([[4.0, 16.0], [1.0, 1.0]], rms)
    assert interval.point == pytest.approx(math.sqrt(10))
