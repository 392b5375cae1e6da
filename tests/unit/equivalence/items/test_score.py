"""Per family: accuracy, the unparsed and cut-off shares against their caps, and the offline re-judge."""

from __future__ import annotations

from pytest_vllmqual.equivalence.items.score import family_summaries, rejudge
from pytest_vllmqual.equivalence.outcomes import ItemOutcome


def outcome(family: str, n: int, *, correct: bool = False, parsed: bool = True, cut: bool = False) -> ItemOutcome:
    return ItemOutcome(f"{family}-{n}", family, correct, parsed, cut)


def test_a_family_over_a_cap_is_not_measured_with_the_reason() -> None:
    outcomes = ([outcome("arithmetic", i, correct=i < 2) for i in range(4)]
                + [outcome("recall", i, parsed=i == 0) for i in range(4)]
                + [outcome("lists", i, correct=True, cut=i > 0) for i in range(4)])
    rows = family_summaries(outcomes, max_unparsed_pct=50, max_hit_max_tokens_pct=50)
    by = {row["family"]: row for row in rows}
    assert [row["family"] for row in rows] == ["arithmetic", "recall", "lists"]
    assert by["arithmetic"] == {"family": "arithmetic", "items": 4, "correct": 2, "accuracy_pct": 50.0,
                                "unparsed_pct": 0.0, "hit_max_tokens_pct": 0.0, "measured": True}
    assert not by["recall"]["measured"]
    assert by["recall"]["reason"] == "not measured: 75.0% of its answers could not be parsed (cap 50%)"
    assert by["lists"]["reason"] == "not measured: 75.0% of its answers ended at max_tokens (cap 50%)"


def test_a_family_near_0_or_100_percent_says_it_cannot_tell_arms_apart() -> None:
    rows = family_summaries([outcome("needle", i) for i in range(10)]
                            + [outcome("json_field", i, correct=True) for i in range(10)],
                            max_unparsed_pct=50, max_hit_max_tokens_pct=50)
    assert rows[0]["measured"] and "cannot tell arms apart for this model" in rows[0]["note"]
    assert rows[0]["note"].startswith("accuracy near 0 (0.0%)")
    assert rows[1]["note"].startswith("accuracy near 100% (100.0%)")


def test_rejudge_scores_stored_answers_again() -> None:
    answers = [{"item_id": "a-0", "family": "arithmetic", "judge": "final_number", "expected": "12",
                "text": "5 + 7 = 12", "finish_reason": "stop"},
               {"item_id": "a-1", "family": "arithmetic", "judge": "final_number", "expected": "12",
                "text": "twelve and more", "finish_reason": "length"}]
    assert rejudge(answers) == [ItemOutcome("a-0", "arithmetic", True, True, False),
                                ItemOutcome("a-1", "arithmetic", False, False, True)]
