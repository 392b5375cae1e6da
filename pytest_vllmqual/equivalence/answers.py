"""Whole answers of two arms: greedy paths and scored items (flips, exact McNemar).

A greedy answer at temperature 0 either matches the control's token for token, or departs at a
first position. There it is a *near tie* when the candidate's token was in the control's top-K
within 0.5 nats of the control's top token (the control nearly chose it too), else a *hard*
divergence. Answers that never depart are censored at ``max_tokens``: the divergence, if any,
lies beyond what was generated.

Flips count items scored in both arms that changed: b = correct → incorrect, c = incorrect →
correct. Accuracy (c − b) can stay flat while many answers flip, so both are reported; the exact
McNemar test (:func:`pytest_vllmqual.equivalence.paired.mcnemar_exact`) is the two-sided binomial
test of b out of b + c at p = 0.5, and p = 1 when nothing flipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_vllmqual.records import Divergence

from .paired import mcnemar_exact
from .position import NEAR_TIE_NATS, top_token

__all__ = ["FlipCount", "GreedyStep", "PathComparison", "compare_paths", "count_flips"]


@dataclass(frozen=True)
class GreedyStep:
    """One generated token of a greedy answer: its id and the top-K log probabilities at its position."""

    token: int
    top: Mapping[int, float]


@dataclass(frozen=True)
class PathComparison:
    """Two greedy answers to one prompt: identical, or where and how they first differ."""

    kind: Divergence
    #: The first position (0-based) where the answers differ; None when identical (censored).
    position: int | None
    #: The positions compared: the longer answer's length, or ``max_tokens`` when censored.
    length: int

    @property
    def identical(self) -> bool:
        return self.kind is Divergence.IDENTICAL


def compare_paths(control: Sequence[GreedyStep], candidate: Sequence[GreedyStep], *,
                  max_tokens: int) -> PathComparison:
    """Compare the candidate's greedy answer with the control's (both at temperature 0)."""
    shared = min(len(control), len(candidate))
    for t in range(shared):
        if control[t].token != candidate[t].token:
            return PathComparison(_kind_at(control[t], candidate[t].token), t, max(len(control), len(candidate)))
    if len(control) == len(candidate):
        return PathComparison(Divergence.IDENTICAL, None, max(max_tokens, shared))
    # One answer ended (its end-of-sequence token is not returned) where the other went on: the
    # control's top-K at that position cannot say how close the end was, so it counts as hard.
    return PathComparison(Divergence.HARD, shared, max(len(control), len(candidate)))


def _kind_at(control: GreedyStep, candidate_token: int) -> Divergence:
    best = top_token(control.top)
    if best is None or candidate_token not in control.top:
        return Divergence.HARD
    gap = control.top[best] - control.top[candidate_token]
    return Divergence.NEAR_TIE if gap <= NEAR_TIE_NATS else Divergence.HARD


@dataclass(frozen=True)
class FlipCount:
    """Items scored in both arms: n, b (correct → incorrect), c (incorrect → correct)."""

    n: int
    b: int
    c: int

    @property
    def flips(self) -> float:
        return (self.b + self.c) / self.n if self.n else 0.0

    @property
    def delta_accuracy(self) -> float:
        return (self.c - self.b) / self.n if self.n else 0.0

    @property
    def p_value(self) -> float:
        return mcnemar_exact(self.b, self.c)


def count_flips(pairs: Sequence[tuple[bool, bool]]) -> FlipCount:
    """(control correct, candidate correct) per item → the flip counts."""
    b = sum(1 for control, candidate in pairs if control and not candidate)
    c = sum(1 for control, candidate in pairs if candidate and not control)
    return FlipCount(len(pairs), b, c)
