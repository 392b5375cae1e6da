"""The one rule for a check not measured: each place's words map onto passed, failed or not
measured; a not-measured reason starts ``not measured:``; the exit code rises from 0 to 1 only
under the strict option; the terminal's last lines name each check and the exit."""

from __future__ import annotations

import pytest

from pytest_vllmqual.not_measured import (
    Measured,
    Unmeasured,
    equivalence_unmeasured,
    exit_code,
    is_not_measured,
    junit_element,
    not_measured,
    of_equivalence,
    of_figure,
    of_level,
    summary_lines,
)
from pytest_vllmqual.records import EquivalenceVerdict, FigureStatus, LevelJudgement


@pytest.mark.parametrize(("word", "measured"), [
    (EquivalenceVerdict.EQUIVALENT, Measured.PASSED), (EquivalenceVerdict.NOT_EQUIVALENT, Measured.FAILED),
    (EquivalenceVerdict.INCONCLUSIVE, Measured.NOT_MEASURED), (EquivalenceVerdict.NOT_MEASURABLE, Measured.NOT_MEASURED),
    (None, Measured.NOT_MEASURED), ("a word from a newer release", Measured.NOT_MEASURED),
])
def test_every_equivalence_word_maps_onto_the_rule(word: object, measured: Measured) -> None:
    assert of_equivalence(word) is measured


def test_figures_and_levels_map_onto_the_rule() -> None:
    assert [of_figure(s) for s in FigureStatus] == [Measured.PASSED, Measured.FAILED, Measured.NOT_MEASURED,
                                                     Measured.PASSED, Measured.NOT_MEASURED, Measured.NOT_MEASURED]
    assert [of_level(j) for j in LevelJudgement] == [Measured.PASSED, Measured.FAILED, Measured.NOT_MEASURED]
    assert [junit_element(m) for m in Measured] == [None, "failure", "skipped"]


def test_a_reason_is_prefixed_once_and_only_prefixed_reasons_count() -> None:
    assert not_measured("level 3 straddles") == "not measured: level 3 straddles"
    assert not_measured(not_measured("x")) == "not measured: x"
    assert is_not_measured("not measured: x")
    assert not is_not_measured("not applicable to recipe tiny-cpu: it sets no gates.load") and not is_not_measured(None)


@pytest.mark.parametrize(("code", "strict", "unmeasured", "expected"), [
    (0, False, 1, 0), (0, True, 1, 1), (0, True, 0, 0), (1, False, 1, 1), (1, True, 1, 1), (2, True, 1, 2),
])
def test_only_strict_turns_a_clean_exit_into_1(code: int, strict: bool, unmeasured: int, expected: int) -> None:
    items = [Unmeasured("gate load (tiny-cpu)", "not measured: level 3")] * unmeasured
    assert exit_code(code, items, strict=strict) == expected


def test_the_last_lines_name_each_check_then_the_exit() -> None:
    items = [Unmeasured("gate ladder (x)", "not measured: no rungs"),
             Unmeasured("equivalence (A/B comparison)", "inconclusive: flips undecided")]
    assert summary_lines(items, code=0, strict=False, option="--vllmqual-strict") == [
        "gate ladder (x): not measured: no rungs",
        "equivalence (A/B comparison): not measured: inconclusive: flips undecided",
        "2 checks not measured: not a pass and not a failure (exit 0; --vllmqual-strict makes it exit 1)"]
    assert summary_lines(items, code=1, strict=True, option="--strict")[-1] == (
        "2 checks not measured: not a pass; --strict makes that exit 1 (exit 1)")
    assert summary_lines([], code=0, strict=True, option="--strict") == []


def test_an_equivalence_section_is_one_check_only_when_not_measured() -> None:
    section = {"verdict": "inconclusive", "reasons": ["flips undecided", "hard divergences undecided"]}
    assert equivalence_unmeasured("drift against r.json", section) == Unmeasured(
        "drift against r.json", "inconclusive: flips undecided (+1 more)")
    assert equivalence_unmeasured("x", {"verdict": "not equivalent", "reasons": ["top-1 below"]}) is None
    assert equivalence_unmeasured("x", None) is None
