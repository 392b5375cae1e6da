"""Judging a known-answer question by the answer's final number (negations and alternatives
refused), and the reasoning gate's fingerprint check of prompt lengths per effort."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

__all__ = ["NumberAnswer", "check_fingerprints", "judge_final_number"]


def check_fingerprints(counts: dict[str, int], expected: dict[str, int]) -> list[str]:
    """Reasoning contract: counts match the pinned fingerprints and differ between efforts."""
    problems: list[str] = []
    if len(counts) > 1 and len(set(counts.values())) == 1:
        problems.append(
            f"the prompt has {next(iter(counts.values()))} tokens at every effort "
            f"({', '.join(counts)}): the chat template ignores reasoning_effort")
    elif len(set(counts.values())) < len(counts):
        problems.append(f"some efforts give the same prompt length: {counts}")
    for effort, want in expected.items():
        got = counts.get(effort)
        if got != want:
            problems.append(f"effort {effort}: {got} prompt tokens, expected fingerprint {want}")
    return problems


_NUMBER = re.compile(r"(?<![\w.])[-\u2212]?\d+(?:[.,]\d+)?(?![\w.]\d)")
_NEGATED = re.compile(r"(?:\bnot|\bnever|\bno|n't|\bisn't|\bwouldn't)\W*(?:\w+\W+)?$", re.IGNORECASE)
_ALTERNATIVE = re.compile(r"^\W*(?:or|and/or)\W*$", re.IGNORECASE)


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
