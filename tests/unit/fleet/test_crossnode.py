"""Cross-node comparison: facts within tolerance agree, the odd one out is named only with 3+ nodes."""

from __future__ import annotations

from typing import Any

from pytest_vllmqual.fleet.crossnode import compare_nodes


def _row(node: str, kv: int = 2_097_152, cold: float = 80.0, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"node": node, "kv_cache_tokens": kv, "max_concurrency": 64.0, "min_rank_kv_gib": 1.0,
                           "kv_tokens_per_gib": 2_097_152.0, "tp_size_seen": 2, "vllm_version": "0.32.0",
                           "recipe_sha256": "a" * 64, "cold_start_s": cold, "largest_ttft_s": None,
                           "gate_outcomes": {"kv_pool": "passed", "identity": "passed"}, "node_overrides": []}
    row.update(extra)
    return row


def test_three_agreeing_nodes_agree() -> None:
    result = compare_nodes([_row("node-1"), _row("node-2", kv=2_097_000), _row("node-3")])
    assert result["agree"] is True and result["odd_one_out"] == [] and result["findings"] == []
    assert "3 nodes agree" in result["summary"]


def test_odd_one_out_is_named_with_its_overrides() -> None:
    rows = [_row("node-1"), _row("node-2"),
            _row("node-3", kv=1_048_576, node_overrides=["serve.extra_args=[...]"])]
    result = compare_nodes(rows, {"kv_tokens_per_gib_tolerance_pct": 1})
    assert result["agree"] is False and result["odd_one_out"] == ["node-3"]
    finding = next(f for f in result["findings"] if f["key"] == "kv_cache_tokens")
    assert finding["odd_one_out"] == "node-3" and "1,048,576" in finding["text"] and "2,097,152" in finding["text"]
    assert "node-3 ran with the node overrides serve.extra_args=[...]" in result["summary"]
    assert result["summary"].startswith("node-3 differs")


def test_two_nodes_differ_without_blame() -> None:
    result = compare_nodes([_row("node-1"), _row("node-2", kv=1_048_576)])
    assert result["agree"] is False and result["odd_one_out"] == []
    finding = result["findings"][0]
    assert finding["odd_one_out"] is None and "neither is taken as the reference" in finding["text"]


def test_timings_beyond_noise_floor_are_observations_not_disagreement() -> None:
    result = compare_nodes([_row("node-1", cold=80), _row("node-2", cold=81), _row("node-3", cold=120)],
                           {"timing_noise_floor_pct": 5})
    assert result["agree"] is True
    assert [t["key"] for t in result["timing_observations"]] == ["cold_start_s"]
    assert result["timing_observations"][0]["odd_one_out"] == "node-3"


def test_gate_outcome_difference_is_a_finding() -> None:
    rows = [_row("node-1"), _row("node-2"),
            _row("node-3", gate_outcomes={"kv_pool": "failed", "identity": "passed"})]
    result = compare_nodes(rows)
    assert result["agree"] is False and result["odd_one_out"] == ["node-3"]
    assert any(f["kind"] == "gate" and f["key"] == "kv_pool" for f in result["findings"])


def test_version_mismatch_named_among_three() -> None:
    rows = [_row("node-1"), _row("node-2", vllm_version="0.31.0"), _row("node-3")]
    result = compare_nodes(rows)
    assert result["odd_one_out"] == ["node-2"]
