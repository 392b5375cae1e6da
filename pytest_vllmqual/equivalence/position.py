"""One scored position of two arms: the KL lower bound, its coverage, top-1 agreement and the
scored token's figures.

Each arm answers with the scored token's log probability (always returned, whatever K) and its
top-K log probabilities. The full-vocabulary KL divergence cannot be computed from top-K; merging
every token outside the known set into one "other" bucket can only lower KL, so
:func:`kl_lower_bound` is a lower bound of it, never an estimate. No upper bound exists from top-K.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["EPSILON", "NEAR_TIE_NATS", "Position", "PositionFigures", "compare_position", "kl_lower_bound",
           "top_token"]

EPSILON = 1e-10
"""The floor of the merged "other" bucket's probability (its share can round to zero or below)."""

NEAR_TIE_NATS = 0.5
"""A candidate's token within this many nats of the control's top token is a near tie, not a hard change."""


@dataclass(frozen=True)
class Position:
    """One arm at one position: the scored token, its log probability and the top-K log probabilities."""

    token: int
    logprob: float
    top: Mapping[int, float]


def top_token(top: Mapping[int, float]) -> int | None:
    """The most probable token of a top-K list (the lowest id on an exact tie), None when empty."""
    if not top:
        return None
    return min(top, key=lambda token: (-top[token], token))


def kl_lower_bound(control: Position, candidate: Position, *, epsilon: float = EPSILON) -> tuple[float, float]:
    """(KL lower bound, coverage) of the control R against the candidate C at one position.

    I is the set of tokens whose probability both arms returned: the control's top-K and its scored
    token, where the candidate returned them too. P* = max(1 − ΣP_I, ε) and Q* likewise;
    KL_lb = Σ_I P_i ln(P_i / Q_i) + P* ln(P* / Q*). The coverage is ΣP_I, the share of the control's
    probability the bound sees.
    """
    known_p = dict(control.top)
    known_p[control.token] = control.logprob
    known_q = dict(candidate.top)
    known_q[candidate.token] = candidate.logprob
    shared = [token for token in known_p if token in known_q]
    kl = 0.0
    mass_p = mass_q = 0.0
    for token in shared:
        p, q = math.exp(known_p[token]), math.exp(known_q[token])
        mass_p += p
        mass_q += q
        kl += p * (known_p[token] - known_q[token])
    other_p, other_q = max(1.0 - mass_p, epsilon), max(1.0 - mass_q, epsilon)
    kl += other_p * math.log(other_p / other_q)
    return max(kl, 0.0), min(mass_p, 1.0)


@dataclass(frozen=True)
class PositionFigures:
    """The figures of one position: KL lower bound, coverage, top-1 agreement and the scored token's
    change (ln p_R − ln p_C, the position's share of ln PPL ratio, and p_C − p_R)."""

    kl: float
    coverage: float
    top1_agrees: bool
    ln_ratio: float
    delta_p: float
    nll_control: float
    nll_candidate: float


def compare_position(control: Position, candidate: Position) -> PositionFigures:
    """Every figure of one position (both arms scored the same token)."""
    kl, coverage = kl_lower_bound(control, candidate)
    return PositionFigures(
        kl=kl, coverage=coverage,
        top1_agrees=top_token(control.top) == top_token(candidate.top),
        ln_ratio=control.logprob - candidate.logprob,
        delta_p=math.exp(candidate.logprob) - math.exp(control.logprob),
        nll_control=-control.logprob, nll_candidate=-candidate.logprob)
