"""The item bank's judges: right answers, wrong answers, and answers no judge can read (parse failures)."""

from __future__ import annotations

import pytest

from pytest_vllmqual.equivalence.items.judges import (
    JUDGES,
    Judgement,
    exact_text,
    final_number,
    judge,
    number_list,
)
from pytest_vllmqual.words import ItemJudge


@pytest.mark.parametrize(("answer", "expected"), [
    ("119", Judgement(True, True)),
    ("59 + 60 = 119.", Judgement(True, True)),
    ("The answer is 119", Judgement(True, True)),
    ("118", Judgement(False, True)),
    ("119 or 120", Judgement(False, True)),
    ("It is not 119", Judgement(False, True)),
    ("The answer is one hundred nineteen.", Judgement(False, False)),
    ("", Judgement(False, False)),
])
def test_final_number(answer: str, expected: Judgement) -> None:
    assert final_number(answer, "119") == expected


def test_final_number_refuses_an_expected_answer_that_is_not_a_number() -> None:
    with pytest.raises(ValueError, match="not a number"):
        final_number("12", "twelve")


@pytest.mark.parametrize(("answer", "expected"), [
    ("17, 42, 93", Judgement(True, True)),
    ("Sorted: 17, 42, 93.", Judgement(True, True)),
    ("42, 17, 93 sorted is 17, 42, 93", Judgement(True, True)),
    ("17, 93, 42", Judgement(False, True)),
    ("17, 42", Judgement(False, False)),
    ("seventeen, forty-two, ninety-three", Judgement(False, False)),
])
def test_number_list(answer: str, expected: Judgement) -> None:
    assert number_list(answer, "17, 42, 93") == expected


def test_number_list_needs_an_expected_list() -> None:
    with pytest.raises(ValueError, match="holds no integer"):
        number_list("1, 2", "none")


@pytest.mark.parametrize(("answer", "expected"), [
    ("Paris", Judgement(True, True)),
    ('"paris".', Judgement(True, True)),
    ("Paris\nIt is the capital of France.", Judgement(True, True)),
    ("The capital is Paris", Judgement(False, True)),
    ("Lyon", Judgement(False, True)),
    ("  \n ", Judgement(False, False)),
])
def test_exact_text(answer: str, expected: Judgement) -> None:
    assert exact_text(answer, "Paris") == expected


def test_every_judge_word_has_a_judge_and_judge_dispatches_by_name() -> None:
    assert set(JUDGES) == set(ItemJudge)
    assert judge("final_number", "7", "7") == Judgement(True, True)
    with pytest.raises(ValueError):
        judge("regex", "7", "7")
