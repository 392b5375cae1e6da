"""Paired task statistics against published and hand-computed values: Newcombe's interval for paired
proportions (his own worked examples, and a book's), Clopper-Pearson, exact McNemar, Connor's
sample size; then pairing by item and the non-inferiority status."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
from support.equivalence_samples import item_outcomes as outcomes

from pytest_vllmqual.equivalence.intervals import exact_interval
from pytest_vllmqual.equivalence.outcomes import ItemOutcome
from pytest_vllmqual.equivalence.paired import (
    PairedTable,
    TaskSettings,
    check_table,
    connor_items,
    detectable_difference,
    judge_outcomes,
    mcnemar_exact,
    newcombe_paired,
    pair_outcomes,
    wilson_interval,
)
from pytest_vllmqual.words import TaskVerdict

Z95 = 1.959963984540054


# -- Newcombe's hybrid score interval ----------------------------------------------------------------

# Newcombe (1998), "Improved confidence intervals for the difference between binomial proportions
# based on paired data", Statistics in Medicine 17:2635-2650, Table II, method 10 (the four worked
# examples, as (a, b, c, d) and the published limits to four decimals).
NEWCOMBE_TABLE_II = [((36, 12, 2, 0), 0.0569, 0.3404), ((18, 12, 2, 18), 0.0562, 0.3290),
                     ((53, 0, 0, 1), -0.0729, 0.0729), ((0, 30, 0, 0), 0.8395, 1.0)]


@pytest.mark.parametrize(("table", "low", "high"), NEWCOMBE_TABLE_II)
def test_newcombe_reproduces_his_own_worked_examples(table: tuple[int, int, int, int], low: float,
                                                      high: float) -> None:
    a, b, c, d = table
    point, got_low, got_high = newcombe_paired(*table)
    assert point == pytest.approx((b - c) / (a + b + c + d))
    assert (round(got_low, 4), round(got_high, 4)) == (low, high)


def test_newcombe_reproduces_the_published_cavo_example() -> None:
    """Fagerland, Lydersen and Laake (2014, and their 2017 book, chapter 8): complete response before
    and after consolidation therapy (Cavo et al.), 59/6/16/80: -0.0621 (95% CI -0.1186 to -0.0046)."""
    point, low, high = newcombe_paired(59, 6, 16, 80)
    assert (round(point, 4), round(low, 4), round(high, 4)) == (-0.0621, -0.1186, -0.0046)


def _wilson_by_root(events: int, units: int) -> tuple[float, float]:
    """Wilson's interval from its definition: the p whose score statistic |x/n − p| / √(p(1−p)/n)
    equals z, found by bisection on each side of x/n (no closed form)."""
    observed = events / units

    def score(p: float) -> float:
        return abs(observed - p) / math.sqrt(p * (1 - p) / units) - Z95

    def root(lo: float, hi: float) -> float:
        for _ in range(200):
            mid = (lo + hi) / 2
            if (score(mid) > 0) == (score(lo) > 0):
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2
    edge = 1e-15
    low = 0.0 if events == 0 else root(edge, min(observed, 1 - edge))
    high = 1.0 if events == units else root(max(observed, edge), 1 - edge)
    return low, high


def _newcombe_by_hand(a: int, b: int, c: int, d: int) -> tuple[float, float]:
    """Method 10 written out from the paper with the bisected Wilson limits."""
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    (l1, u1), (l2, u2) = _wilson_by_root(a + b, n), _wilson_by_root(a + c, n)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    corrected = max(cross - n / 2, 0) if cross > 0 else cross
    phi = corrected / math.sqrt(margins) if margins else 0.0
    low = (p1 - p2) - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = (p1 - p2) + math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return max(-1.0, low), min(1.0, high)


def test_newcombe_equals_an_independent_implementation_on_random_tables() -> None:
    rng = random.Random(43)
    for _ in range(200):
        table = tuple(rng.choice([0, 0, 1, 2, 5, 17, 60]) for _ in range(4))
        if sum(table) == 0:
            continue
        _, low, high = newcombe_paired(*table)
        assert (low, high) == pytest.approx(_newcombe_by_hand(*table), abs=1e-9), table


def test_wilson_closed_form_matches_its_definition() -> None:
    for events, units in ((0, 8), (3, 8), (8, 8), (412, 1000)):
        assert wilson_interval(events, units) == pytest.approx(_wilson_by_root(events, units), abs=1e-9)


def test_a_table_with_no_items_is_refused() -> None:
    with pytest.raises(ValueError):
        newcombe_paired(0, 0, 0, 0)


# -- Clopper-Pearson and exact McNemar -------------------------------------------------------------

def test_clopper_pearson_of_none_in_eight_is_zero_to_36_9_percent() -> None:
    interval = exact_interval(0, 8)
    assert interval.low == 0.0
    assert interval.high == pytest.approx(1 - 0.025 ** (1 / 8))  # the exact upper bound of 0 of n
    assert round(interval.high or 0.0, 3) == 0.369


def test_exact_mcnemar_of_one_against_nine() -> None:
    # Two-sided binomial of 1 in 10 at 0.5: 2 (C(10,0) + C(10,1)) / 2^10 = 22/1024.
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
    assert round(mcnemar_exact(1, 9), 5) == 0.02148
    assert mcnemar_exact(9, 1) == mcnemar_exact(1, 9)
    assert mcnemar_exact(0, 0) == 1.0


# -- Connor's sample size and the detectable difference --------------------------------------------

def test_connor_with_ten_percent_discordant_needs_870_items_for_three_points() -> None:
    assert math.ceil(connor_items(0.03, 0.10)) == 870


def test_four_hundred_items_at_ten_percent_discordant_detect_about_four_and_a_half_points() -> None:
    delta = detectable_difference(400, 0.10)
    assert delta is not None and 0.043 < delta < 0.046
    # Solving the formula for the difference inverts it.
    assert connor_items(delta, 0.10) == pytest.approx(400)
    assert detectable_difference(870, 0.10) == pytest.approx(0.03, abs=2e-4)


def test_more_items_or_fewer_flips_detect_smaller_differences() -> None:
    assert (detectable_difference(1000, 0.1) or 1) < (detectable_difference(400, 0.1) or 0)
    assert (detectable_difference(400, 0.05) or 1) < (detectable_difference(400, 0.1) or 0)


def test_too_few_items_for_the_formula_give_no_figure() -> None:
    assert detectable_difference(3, 0.1) is None
    assert detectable_difference(0, 0.1) is None


def test_no_discordant_pair_uses_the_exact_upper_bound_of_the_discordant_rate() -> None:
    detectable = PairedTable(200, 0, 0, 0).detectable()
    assert detectable.observed is False
    assert detectable.discordant_rate == pytest.approx(1 - 0.025 ** (1 / 200))
    assert detectable.points == pytest.approx(100 * (detectable_difference(200, detectable.discordant_rate) or 0))
    assert "upper bound" in detectable.to_dict()["basis"]
    seen = PairedTable(180, 12, 8, 0).detectable()
    assert seen.observed is True and seen.discordant_rate == pytest.approx(0.1)


# -- pairing ----------------------------------------------------------------------------------------

def test_items_pair_by_id_and_the_rest_are_counted() -> None:
    control, candidate = outcomes("math", (5, 2, 1, 2))
    control.append(ItemOutcome("only-control", "math", True))
    candidate += [ItemOutcome("only-candidate-1", "math", False), ItemOutcome("only-candidate-2", "json", True)]
    pairs = pair_outcomes(control, list(reversed(candidate)))
    assert sorted(pairs) == ["json", "math"]
    math_pairs = pairs["math"]
    assert (math_pairs.table.a, math_pairs.table.b, math_pairs.table.c, math_pairs.table.d) == (5, 2, 1, 2)
    assert (math_pairs.unpaired_control, math_pairs.unpaired_candidate) == (1, 1)
    assert pairs["json"].table.n == 0 and pairs["json"].unpaired_candidate == 1


def test_an_item_answered_twice_or_in_two_families_is_not_one_bank() -> None:
    twice = [ItemOutcome("x", "f", True), ItemOutcome("x", "f", False)]
    with pytest.raises(ValueError, match="twice"):
        pair_outcomes(twice, [])
    with pytest.raises(ValueError, match="family"):
        pair_outcomes([ItemOutcome("x", "f", True)], [ItemOutcome("x", "g", True)])


# -- non-inferiority -----------------------------------------------------------------------------------

def judge(families: dict[str, tuple[int, int, int, int]], settings: TaskSettings | None = None,
          **marks: tuple[int, int]) -> tuple[dict[str, dict[str, object]], dict[str, object]]:
    control: list[ItemOutcome] = []
    candidate: list[ItemOutcome] = []
    for name, table in families.items():
        left, right = outcomes(name, table, **marks)
        control += left
        candidate += right
    checks, overall = judge_outcomes(control, candidate, settings or TaskSettings())
    return {c.name: c.to_dict() for c in checks}, overall.to_dict()


def _upper(check: dict[str, object]) -> float:
    gap = check["difference_points"]
    assert isinstance(gap, dict)
    return float(gap["control_minus_candidate"]["high"])


def test_a_large_run_with_balanced_flips_is_non_inferior() -> None:
    _, overall = judge({"math": (500, 10, 10, 480)})
    assert overall["status"] == "non-inferior"
    assert _upper(overall) < 3.0
    assert overall["b"] == overall["c"] == 10 and overall["mcnemar_p"] == 1.0


def test_a_collapse_is_inferior_on_any_number_of_items() -> None:
    _, overall = judge({"math": (2, 10, 0, 3)})
    assert overall["status"] == "inferior"
    assert "lower bound is above the 3-point margin" in str(overall["reason"])


def test_a_small_run_straddles_the_margin_and_is_inconclusive_with_its_detectable_difference() -> None:
    _, overall = judge({"math": (40, 3, 2, 35)})
    assert overall["status"] == "inconclusive"
    detectable = overall["detectable_difference"]
    assert isinstance(detectable, dict) and detectable["points"] > 3.0


def test_non_inferior_on_too_few_items_is_too_few_units() -> None:
    wide = TaskSettings(non_inferiority_margin_points=60.0)
    _, overall = judge({"math": (10, 0, 0, 10)}, wide)
    assert overall["status"] == "too few units"
    assert "fewer than the 30 needed" in str(overall["reason"])


def test_arms_at_the_ceiling_with_no_flip_cannot_tell_the_arms_apart() -> None:
    _, overall = judge({"recall": (400, 0, 0, 0)})
    assert _upper(overall) < 3.0  # the interval alone would say non-inferior
    assert overall["status"] == "inconclusive"
    assert "cannot tell the arms apart" in str(overall["reason"])


def test_a_family_over_the_unparsed_cap_is_not_measured_and_left_out_of_the_overall() -> None:
    families, overall = judge({"json": (10, 5, 5, 30), "math": (200, 5, 5, 190)}, unparsed=(0, 20))
    assert families["json"]["status"] == "not measured"
    assert "could not be parsed" in str(families["json"]["reason"])
    assert "compare.max_unparsed_pct" in str(families["json"]["reason"])
    assert families["math"]["status"] != "not measured"
    assert overall["paired"] == 400  # math only


def test_a_family_over_the_max_tokens_cap_is_not_measured() -> None:
    families, _ = judge({"needle": (10, 5, 5, 30)}, truncated=(20, 0))
    assert families["needle"]["status"] == "not measured"
    assert "ended at max_tokens" in str(families["needle"]["reason"])
    shares = families["needle"]["shares"]
    assert isinstance(shares, dict) and shares["control"]["hit_max_tokens_pct"] == 40.0


def test_shares_and_accuracy_are_reported_per_arm() -> None:
    families, _ = judge({"math": (30, 6, 2, 12)}, unparsed=(1, 2))
    math_check = families["math"]
    accuracy = math_check["accuracy_pct"]
    assert isinstance(accuracy, dict)
    assert accuracy["control"]["point"] == 72.0 and accuracy["candidate"]["point"] == 64.0
    assert accuracy["control"]["low"] == round(100 * (exact_interval(36, 50).low or 0), 3)
    shares = math_check["shares"]
    assert isinstance(shares, dict) and shares["candidate"]["unparsed_pct"] == 4.0


def test_the_difference_is_reported_both_ways() -> None:
    check = check_table("math", pair_outcomes(*outcomes("math", (36, 12, 2, 0)))["math"], TaskSettings())
    gap = check.to_dict()["difference_points"]
    assert gap["control_minus_candidate"] == {"point": 20.0, "low": 5.693, "high": 34.043}
    assert gap["candidate_minus_control"] == {"point": -20.0, "low": -34.043, "high": -5.693}


def test_no_answer_in_either_arm_is_not_measured() -> None:
    checks, overall = judge_outcomes([], [], TaskSettings())
    assert checks == [] and overall.status is TaskVerdict.NOT_MEASURED


def test_settings_read_from_the_recipe_raise_the_minimum_but_never_lower_it() -> None:
    assert TaskSettings.from_recipe(None) == TaskSettings()
    raised = TaskSettings.from_recipe({"non_inferiority_margin_points": 5, "family_blocks": True,
                                       "min_items_per_family": 50, "timing_noise_floor_pct": 5})
    assert (raised.non_inferiority_margin_points, raised.family_blocks, raised.min_items_per_family) == (5.0, True, 50)
    assert raised.source == "the control recipe's compare and the defaults"
    assert TaskSettings.from_recipe({"min_items_per_family": 5}).min_items_per_family == 30


def _sum_tables(tables: Sequence[PairedTable]) -> PairedTable:
    return sum(tables, PairedTable())


def test_the_overall_pools_the_families() -> None:
    families, overall = judge({"a": (100, 3, 1, 20), "b": (50, 2, 4, 60)})
    assert overall["table"] == {"a": 150, "b": 5, "c": 5, "d": 80}
    pooled = _sum_tables([PairedTable(100, 3, 1, 20), PairedTable(50, 2, 4, 60)])
    assert overall["paired"] == pooled.n == sum(int(str(f["paired"])) for f in families.values())


def test_the_recipe_schema_declares_every_task_setting_and_refuses_a_lowered_minimum() -> None:
    import jsonschema

    from pytest_vllmqual.layout import load_schema

    compare = load_schema("recipe.schema.yaml")["properties"]["compare"]
    names = [name for name in TaskSettings.__dataclass_fields__ if name != "source"]
    assert set(names) <= set(compare["properties"])
    jsonschema.validate({"non_inferiority_margin_points": 2.5, "family_blocks": True, "min_items_per_family": 60,
                         "max_unparsed_pct": 10, "max_hit_max_tokens_pct": 5}, compare)
    for bad in ({"non_inferiority_margin_points": 0}, {"min_items_per_family": 10}, {"family_blocks": "yes"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, compare)
