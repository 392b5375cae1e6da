"""The floor's alone pass taken from the probe's recorded answers only when the probe asked exactly
the floor's questions: the same chunk tokens, ``top_k``, greedy prompts and greedy answer length."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pytest_vllmqual.equivalence import FloorQuestions, ProbeSettings, RecordedAnswers
from pytest_vllmqual.equivalence.load_floor_runner import _Plan, recorded_alone
from pytest_vllmqual.hashing import sha256_hex

QUESTIONS = FloorQuestions(dataclasses.replace(ProbeSettings(), greedy_max_tokens=16), [("p1", "Say hello.")], [], 32)
PLAN = _Plan(chunks=[(4, [1, 2, 3, 4]), (4, [5, 6, 7, 8])], top_k=5)


def probe_body(**changed: Any) -> dict[str, Any]:
    body = {"chunk_tokens": [[1, 2, 3, 4], [5, 6, 7, 8]], "top_k": 5, "parameters": {"greedy_max_tokens": 16},
            "chunks": [{"length": 4, "scored_from": 2, "positions": []}] * 2,
            "greedy": [{"id": "p1", "prompt_sha256": sha256_hex("Say hello."), "steps": []}]}
    return {**body, **changed}


def test_the_probe_that_asked_the_same_questions_is_the_alone_pass() -> None:
    alone = recorded_alone(QUESTIONS, PLAN, RecordedAnswers(probe_body(), None, None))
    assert alone is not None and alone["recorded_by"] == ["equivalence", "items"]
    assert alone["chunks"] == probe_body()["chunks"] and alone["greedy"] == probe_body()["greedy"]
    assert alone["outcomes"] == alone["answers"] == [], "no items asked, none needed"


@pytest.mark.parametrize("changed", [
    {"chunk_tokens": [[1, 2, 3, 4], [5, 6, 7, 9]]},
    {"top_k": 20},
    {"parameters": {"greedy_max_tokens": 64}},
    {"greedy": [{"id": "p1", "prompt_sha256": sha256_hex("Say goodbye."), "steps": []}]},
])
def test_a_probe_that_asked_anything_else_is_not(changed: dict[str, Any]) -> None:
    assert recorded_alone(QUESTIONS, PLAN, RecordedAnswers(probe_body(**changed), None, None)) is None


def test_no_probe_recorded_means_asking() -> None:
    assert recorded_alone(QUESTIONS, PLAN, RecordedAnswers(None, None, None)) is None
