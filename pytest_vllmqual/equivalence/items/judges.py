"""The item bank's judges: pure functions from an answer's text and the expected answer to a judgement.

Each judge says two things: whether the answer is correct, and whether it could be judged at all
(``parsed``). A family scored mostly on answers the judge could not read measures the format the
model answers in, not the task, so the gate counts the unparsed share per family and caps it.
The arithmetic rule is the quality gates' own (the final number the answer affirms, "not 7" and
"7 or 8" wrong), so "3 + 4 = 7" is right everywhere the package judges a number.

A judge's name is what an operator's own item names (``judge`` in the JSONL file); changing what a
judge accepts is a new :data:`JUDGE_VERSION`, which is part of the bank's hash.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from pytest_vllmqual.words import ItemJudge

__all__ = ["JUDGES", "JUDGE_VERSION", "Judgement", "NumberAnswer", "exact_text", "final_number", "judge",
           "judge_final_number", "number_list"]

JUDGE_VERSION = "items-judges/1"

_NUMBER = re.compile(r"(?<![\w.])[-\u2212]?\d+(?:[.,]\d+)?(?![\w.]\d)")
_NEGATED = re.compile(r"(?:\bnot|\bnever|\bno|n't|\bisn't|\bwouldn't)\W*(?:\w+\W+)?$", re.IGNORECASE)
_ALTERNATIVE = re.compile(r"^\W*(?:or|and/or)\W*$", re.IGNORECASE)
_INTEGER = re.compile(r"(?<![\w.])-?\d+(?![\w]|\.\d)")
_EDGE = " \t\r\n\"'`.,;:!?*()[]{}"


@dataclass(frozen=True)
class NumberAnswer:
    """An answer to a known-answer arithmetic question, judged by its final number."""

    correct: bool
    """The last number the answer affirms is the expected one, and no alternative is offered."""
    number_only: bool
    """The answer is the number alone (the prompt asks for it; a finding, not a pass rule)."""
    why: str
    """What decided it, in the harness's words (no model text)."""


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace("\u2212", "-").replace(",", "."))
    except ValueError:
        return None


def judge_final_number(answer: str, expected: float) -> NumberAnswer:
    """Judge an arithmetic answer by its final number: "3 + 4 = 7" and "7." are correct; "not 7"
    (negated) and "7 or 8" / "8 or 7" (an alternative offered) are not. Whether the model
    followed "number only" is reported beside, never part of the judgement."""
    stripped = answer.strip().rstrip(".!").strip()
    found = list(_NUMBER.finditer(answer))
    only = len(found) == 1 and _NUMBER.fullmatch(stripped) is not None
    if not found:
        return NumberAnswer(False, False, "no number in the answer")
    for left, right in itertools.pairwise(found):
        if _ALTERNATIVE.match(answer[left.end():right.start()]):
            return NumberAnswer(False, only, "the answer offers alternatives")
    affirmed = [m for m in found if not _NEGATED.search(answer[:m.start()][-24:])]
    if not affirmed:
        return NumberAnswer(False, only, "the answer negates its only number")
    value = _as_number(affirmed[-1].group())
    if value is None or abs(value - float(expected)) > 1e-9:
        return NumberAnswer(False, only, "the final number is not the expected one")
    return NumberAnswer(True, only, "the final number is the expected one")


@dataclass(frozen=True)
class Judgement:
    """One answer judged: correct or not, and whether the judge found an answer to judge."""

    correct: bool
    parsed: bool


def final_number(answer: str, expected: str) -> Judgement:
    """Correct when the final number the answer affirms is ``expected``; unparsed when it has no number."""
    value = _as_number(expected.strip())
    if value is None:
        raise ValueError(f"the expected answer {expected!r} of a final_number item is not a number")
    if not _NUMBER.search(answer):
        return Judgement(False, False)
    return Judgement(judge_final_number(answer, value).correct, True)


def number_list(answer: str, expected: str) -> Judgement:
    """Correct when the answer's last integers are the expected list in order (an answer that first
    repeats the question's list still counts); unparsed when it has fewer integers than expected."""
    want = [int(m.group()) for m in _INTEGER.finditer(expected)]
    if not want:
        raise ValueError(f"the expected answer {expected!r} of a number_list item holds no integer")
    got = [int(m.group()) for m in _INTEGER.finditer(answer)]
    if len(got) < len(want):
        return Judgement(False, False)
    return Judgement(got[-len(want):] == want, True)


def _normal(text: str) -> str:
    return " ".join(text.strip(_EDGE).lower().split())


def exact_text(answer: str, expected: str) -> Judgement:
    """Correct when the answer, or its first line, is the expected text (case, surrounding quotes,
    punctuation and spacing aside); unparsed when the answer is empty."""
    if not _normal(answer):
        return Judgement(False, False)
    want = _normal(expected)
    first = _normal(answer.strip().splitlines()[0])
    return Judgement(want in (_normal(answer), first), True)


JUDGES: dict[ItemJudge, Callable[[str, str], Judgement]] = {
    ItemJudge.FINAL_NUMBER: final_number, ItemJudge.NUMBER_LIST: number_list, ItemJudge.EXACT_TEXT: exact_text}
"""Every shipped judge by its name (what an operator's item may name)."""


def judge(name: ItemJudge | str, answer: str, expected: str) -> Judgement:
    """Judge ``answer`` with the judge called ``name``."""
    return JUDGES[ItemJudge(name)](answer, expected)
