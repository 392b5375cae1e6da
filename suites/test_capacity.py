"""Capacity: the exact-length context ladder, the largest actual prompt, post-probe smokes,
the max_model_len + 1 rejection, the server-side cross-check and concurrency (`-m capacity`).

Measurements run alone: the plugin holds the traffic lock exclusively for `capacity` gates."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.ladder import run_concurrency, run_ladder
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.recipe.loader import Recipe

pytestmark = [pytest.mark.capacity]


@pytest.mark.gate("ladder")
def test_ladder(qual_client: QualClient, recipe: Recipe, gate: GateRecorder, progress: Any) -> None:
    """Ladder: every rung exact (calibration error 0), answered, followed by a passing smoke."""
    settings = recipe.gate("capacity")
    result = run_ladder(qual_client, recipe, progress=progress)
    gate.measure(ladder=[r.to_dict() for r in result.rungs])
    largest = result.largest_ok
    minimum = settings.get("min_largest_prompt")
    gate.threshold(calibration_error=0, min_largest_prompt=minimum, post_probe_smoke="passed",
                   max_len_plus_one="HTTP 400")
    if largest is not None:
        gate.measure(largest_prompt_tokens=largest.prompt_tokens, largest_ttft_s=largest.ttft_s,
                     largest_e2e_s=largest.e2e_s, largest_prefill_tok_s=largest.prefill_tok_s,
                     largest_decode_tok_s=largest.decode_tok_s, largest_server_ttft_s=largest.server_ttft_s)
        ttft = "n/a (no output delta)" if largest.ttft_s is None else f"{largest.ttft_s:.3f} s"
        gate.summary(f"largest actual prompt {largest.prompt_tokens:,}; TTFT {ttft}")
    problems = result.problems(minimum)
    assert not problems, "ladder: " + "; ".join(problems)


@pytest.mark.gate("concurrency")
def test_concurrency(qual_client: QualClient, recipe: Recipe, gate: GateRecorder, progress: Any) -> None:
    """Concurrency: N simultaneous requests complete; per-request and aggregate figures, preemptions."""
    settings = recipe.gate("capacity").get("concurrency") or {}
    result = run_concurrency(qual_client, recipe, progress=progress)
    gate.measure(requests=len(result.requests), prompt_tokens=settings.get("prompt_tokens"),
                 wall_s=round(result.wall_s, 4), aggregate_output_tok_s=result.aggregate_output_tok_s,
                 preemptions=result.preemptions, per_request=result.requests)
    gate.summary(f"{len(result.requests) - len(result.failures)}/{len(result.requests)} concurrent requests")
    assert not result.failures, "concurrency: " + "; ".join(result.failures)
