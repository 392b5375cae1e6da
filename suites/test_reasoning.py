"""Reasoning prompt contract: per-effort prompt-token fingerprints (the seeds' "6/85/98")."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.checks import check_fingerprints
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.privacy.public_text import public_failure
from pytest_vllmqual.recipe.loader import Recipe

pytestmark = [pytest.mark.reasoning]

DEFAULT_MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Hello"}]


@pytest.mark.gate("reasoning_fingerprints")
def test_reasoning_fingerprints(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """Each effort's prompt-token count, from usage and /tokenize, equals its pinned fingerprint."""
    settings = recipe.gate("reasoning")
    expected: dict[str, int] = dict(settings.get("fingerprints") or {})
    efforts: list[str] = list(expected) or list(settings.get("efforts") or ["low", "high", "max"])
    messages = settings.get("messages") or DEFAULT_MESSAGES
    counts: dict[str, int] = {}
    disagreements: list[str] = []
    for effort in efforts:
        result = qual_client.chat({"messages": messages, "reasoning_effort": effort, "max_tokens": 1,
                                   "temperature": 0}, label=f"fingerprint-{effort}")
        assert result.status_code == 200, f"effort {effort}: {public_failure(result.attempt)}"
        usage_count = result.prompt_tokens or 0
        tokenized = qual_client.tokenize_chat(messages, chat_template_kwargs={"reasoning_effort": effort},
                                              label=f"tokenize-{effort}")
        assert tokenized.status_code == 200, f"/tokenize for {effort}: HTTP {tokenized.status_code}"
        token_count = int((tokenized.body or {}).get("count", -1))
        if token_count != usage_count:
            disagreements.append(f"effort {effort}: usage.prompt_tokens {usage_count} but /tokenize {token_count}")
        counts[effort] = usage_count
    gate.measure(fingerprints=counts, **{f"prompt_tokens_{e}": n for e, n in counts.items()})
    gate.threshold(fingerprints=expected or "not pinned: counts must differ between efforts")
    gate.summary("/".join(str(counts[e]) for e in efforts) + " prompt tokens (" + "/".join(efforts) + ")")
    if recipe.discovered and not expected:
        gate.summary(gate.record.summary + "; nothing pinned (discovered recipe), measured only")
        assert not disagreements, "reasoning contract: " + "; ".join(disagreements)
        return
    problems = disagreements + check_fingerprints(counts, expected)
    assert not problems, "reasoning contract: " + "; ".join(problems)
