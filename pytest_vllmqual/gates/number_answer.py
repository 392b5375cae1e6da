"""The reasoning gate's fingerprint check of prompt lengths per effort, and the final-number judge
the quality check shares with the item bank (it lives with the item bank's judges)."""

from __future__ import annotations

from pytest_vllmqual.equivalence import NumberAnswer, judge_final_number

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
