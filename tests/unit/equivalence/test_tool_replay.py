"""Whether a tool-call replay can tell two arms apart: an arm's accuracy inside 20-80% leaves room
for flips both ways; when neither arm's is, a comparison says so instead of reading zero discordant
pairs as no change. Every accuracy here is counted by hand from the outcomes given."""

from __future__ import annotations

from pytest_vllmqual.equivalence.outcomes import ItemOutcome
from pytest_vllmqual.equivalence.tool_replay import FAMILY, USEFUL_RANGE, arm_range, pair_informative


def outcomes(correct: int, total: int) -> list[ItemOutcome]:
    return [ItemOutcome(f"c{i:03d}", FAMILY, correct=i < correct) for i in range(total)]


def block(correct: int, total: int, sha: str = "a" * 64) -> dict[str, object]:
    return {"bank": {"sha256": sha}, **arm_range(outcomes(correct, total))}


def test_inside_the_range_is_informative_and_its_edges_count() -> None:
    assert USEFUL_RANGE == (0.2, 0.8)
    assert arm_range(outcomes(50, 100))["informative"] is True
    assert arm_range(outcomes(20, 100))["informative"] is True   # 20% exactly
    assert arm_range(outcomes(80, 100))["informative"] is True   # 80% exactly
    assert arm_range(outcomes(19, 100))["informative"] is False
    assert arm_range(outcomes(81, 100))["informative"] is False


def test_a_perfect_arm_says_why_it_is_not_informative() -> None:
    said = arm_range(outcomes(100, 100))
    assert said["accuracy"] == 1.0 and said["correct"] == 100 and said["count"] == 100
    assert said["informative_reason"].startswith("accuracy 100/100 (100.0%) is outside the useful range 20.0%-80.0%")


def test_no_answers_are_not_informative() -> None:
    said = arm_range([])
    assert said["accuracy"] is None and said["informative"] is False


def test_both_arms_outside_the_range_cannot_tell_the_arms_apart() -> None:
    ok, why = pair_informative(block(100, 100), block(99, 100))
    assert ok is False
    assert "both arms' accuracy lies outside 20.0%-80.0% (100.0%, 99.0%)" in why


def test_one_arm_inside_the_range_is_enough() -> None:
    assert pair_informative(block(100, 100), block(70, 100)) == (
        True, "at least one arm's accuracy lies in the useful range")


def test_different_banks_or_a_missing_replay_are_not_informative() -> None:
    assert pair_informative(block(50, 100), block(50, 100, sha="b" * 64))[0] is False
    ok, why = pair_informative(None, block(50, 100))
    assert ok is False and why == "the control ran no tool-call replay"
