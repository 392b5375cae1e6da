"""The equivalence verdict over its figures: ``equivalent`` needs every figure its rule names
measured within its threshold on at least the minimum units (scored chunks, greedy prompts, items
scored in both arms); a figure not measured, or measured on too few units, leaves it
``inconclusive`` and is named; one figure beyond makes it ``not equivalent``. Seeded random cases
check that more evidence within never takes ``equivalent`` away."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pytest_vllmqual.equivalence.verdict import (
    FIGURES,
    FigureCheck,
    Thresholds,
    check_figure,
    decide_equivalence,
)
from pytest_vllmqual.records import EquivalenceVerdict, FigureStatus

SPECS = {spec.key: spec for spec in FIGURES}


def _zero(units: int) -> dict[str, Any]:
    return {"point": 0.0, "low": 0.0, "high": 0.0, "units": units}


def _measured_within(units: int = 8, items: int = 7) -> dict[str, FigureCheck]:
    """Every figure of an exact repeat: top-1 100%, every difference 0."""
    intervals = {"top1_agreement": {"point": 1.0, "low": 1.0, "high": 1.0, "units": units},
                 "ln_ppl_ratio": _zero(units), "rms_delta_p": _zero(units), "kl_lower_bound": _zero(units),
                 "hard_divergence": _zero(units), "flips": _zero(items)}
    return {key: check_figure(SPECS[key], intervals[key], Thresholds()) for key in SPECS}


def test_every_figure_of_an_exact_repeat_on_enough_units_is_equivalent() -> None:
    verdict, reasons = decide_equivalence(list(_measured_within().values()))
    assert verdict is EquivalenceVerdict.EQUIVALENT, reasons


def test_a_figure_not_measured_leaves_the_verdict_inconclusive_and_names_it() -> None:
    checks = _measured_within()
    checks["flips"] = check_figure(SPECS["flips"], None, Thresholds())
    verdict, reasons = decide_equivalence(list(checks.values()))
    assert verdict is EquivalenceVerdict.INCONCLUSIVE
    assert reasons == ["flips not measured: 0 items scored in both arms, at least 6 needed "
                       "(fix: run the functional and quality gates on both arms)"]


@pytest.mark.parametrize(("key", "units", "named"), [
    ("hard_divergence", 4, "on 4 greedy prompts"),
    ("top1_agreement", 7, "on 7 scored chunks"),
    ("flips", 5, "on 5 items scored in both arms"),
])
def test_a_figure_within_on_too_few_units_is_inconclusive(key: str, units: int, named: str) -> None:
    checks = _measured_within()
    interval = {"point": 1.0, "low": 1.0, "high": 1.0, "units": units} if key == "top1_agreement" else _zero(units)
    checks[key] = check_figure(SPECS[key], interval, Thresholds())
    verdict, reasons = decide_equivalence(list(checks.values()))
    assert verdict is EquivalenceVerdict.INCONCLUSIVE
    assert len(reasons) == 1 and named in reasons[0] and "fewer than the" in reasons[0], reasons


def test_a_figure_beyond_needs_no_minimum() -> None:
    """Two of four greedy answers diverged hard: the exact interval is wide, but it excludes zero."""
    checks = _measured_within()
    checks["hard_divergence"] = check_figure(SPECS["hard_divergence"], {"point": 0.5, "low": 0.0676, "high": 0.9324,
                                                                         "units": 4, "events": 2}, Thresholds())
    verdict, reasons = decide_equivalence(list(checks.values()))
    assert verdict is EquivalenceVerdict.NOT_EQUIVALENT and reasons[0].startswith("hard-divergence rate 2 of 4")


def test_the_recipe_raises_the_minimums_and_cannot_lower_them() -> None:
    raised = Thresholds.from_recipe({"min_scored_chunks": 12, "min_greedy_prompts": 16, "min_shared_items": 20})
    assert (raised.min_scored_chunks, raised.min_greedy_prompts, raised.min_shared_items) == (12, 16, 20)
    lowered = Thresholds.from_recipe({"min_scored_chunks": 2})
    assert lowered.min_scored_chunks == Thresholds().min_scored_chunks == 8
    assert (Thresholds().min_greedy_prompts, Thresholds().min_shared_items) == (8, 6)
    checks = list(_measured_within(units=8).values())
    assert decide_equivalence([check_figure(c.spec, {"point": c.point and c.point / c.spec.scale, "low": c.low and
                                                     c.low / c.spec.scale, "high": c.high and c.high / c.spec.scale,
                                                     "units": 8 if c.spec.key != "flips" else 7}, raised)
                               for c in checks])[0] is EquivalenceVerdict.INCONCLUSIVE


_STATUSES = list(FigureStatus)


def _random_check(rng: random.Random, status: FigureStatus | None = None) -> FigureCheck:
    spec = rng.choice(FIGURES)
    status = status or rng.choice(_STATUSES)
    if not spec.exact and status in (FigureStatus.WITHIN, FigureStatus.UNDECIDED):
        status = FigureStatus.NOT_SHOWN
    return FigureCheck(spec, 0.0, 0.0, 0.0, 0.0, status, units=8, min_units=8)


def test_property_a_figure_within_never_takes_equivalence_away_and_one_beyond_decides() -> None:
    """Over many seeded random sets of figures: adding (or measuring) a figure within never turns
    ``equivalent`` into anything else; adding a figure beyond always gives ``not equivalent``;
    replacing a figure not measured or short of units by the same figure within never makes the
    verdict worse."""
    rng = random.Random(20261205)
    worse = {EquivalenceVerdict.EQUIVALENT: 0, EquivalenceVerdict.INCONCLUSIVE: 1,
             EquivalenceVerdict.NOT_MEASURABLE: 1, EquivalenceVerdict.NOT_EQUIVALENT: 2}
    for _ in range(3000):
        checks = [_random_check(rng) for _ in range(rng.randint(0, 8))]
        verdict, _ = decide_equivalence(checks)
        within = _random_check(rng, FigureStatus.WITHIN)
        if within.spec.exact:
            after, _ = decide_equivalence([*checks, within])
            assert not (verdict is EquivalenceVerdict.EQUIVALENT and after is not verdict), (checks, within)
        beyond, _ = decide_equivalence([*checks, _random_check(rng, FigureStatus.BEYOND)])
        assert beyond is EquivalenceVerdict.NOT_EQUIVALENT
        short = [i for i, c in enumerate(checks) if c.spec.exact and c.status in (
            FigureStatus.NOT_MEASURED, FigureStatus.TOO_FEW)]
        if short:
            index = rng.choice(short)
            measured = list(checks)
            measured[index] = FigureCheck(checks[index].spec, 0.0, 0.0, 0.0, 0.0, FigureStatus.WITHIN, units=8,
                                          min_units=8)
            after, _ = decide_equivalence(measured)
            assert worse[after] <= worse[verdict], (checks, index, verdict, after)


def test_property_zero_events_on_more_units_stay_within() -> None:
    """A counted figure with no event: within its zero threshold from the minimum units on, never
    before; one event is beyond zero at any count; a looser threshold never judges worse."""
    from pytest_vllmqual.equivalence.intervals import exact_interval

    rng = random.Random(20261206)
    order = {FigureStatus.WITHIN: 0, FigureStatus.UNDECIDED: 1, FigureStatus.TOO_FEW: 1, FigureStatus.BEYOND: 2}
    for _ in range(400):
        key = rng.choice(("hard_divergence", "flips"))
        spec, units = SPECS[key], rng.randint(1, 40)
        events = rng.choice((0, 0, 1, rng.randint(0, units)))
        interval = exact_interval(events, units).to_dict()
        strict = check_figure(spec, interval, Thresholds())
        minimum = Thresholds().min_greedy_prompts if key == "hard_divergence" else Thresholds().min_shared_items
        if events == 0:
            assert strict.status is (FigureStatus.WITHIN if units >= minimum else FigureStatus.TOO_FEW)
        else:
            assert strict.status is FigureStatus.BEYOND
        assert interval["low"] <= interval["point"] <= interval["high"]
        loose = Thresholds(**{spec.threshold: rng.uniform(0.0, 100.0)})
        assert order[check_figure(spec, interval, loose).status] <= order[strict.status]
