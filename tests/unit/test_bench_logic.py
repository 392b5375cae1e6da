"""The benchmark's own arithmetic: how a figure becomes ok / noisy / missed / FAIL, and how a
run's wall time is split. Timings themselves are guarded by `make bench`, not here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_fidelity
import bench_verdict
import run_all


def test_check_verdicts_target_guard_and_interval() -> None:
    check = run_all.Check("ratio", ("x",), 0.97, 1.03, ci_path=("ci",), guard=(0.9, 1.1))
    assert check.verdict(1.0) == "ok"
    assert check.verdict(1.05, {"ci": [1.01, 1.2]}) == "noisy"  # the interval still reaches the band
    assert check.verdict(1.05, {"ci": [1.04, 1.06]}) == "missed"  # past the target, within the guard
    assert check.verdict(1.2, {"ci": [1.15, 1.25]}) == "FAIL"
    assert check.verdict(None) == "missing"
    assert "guard" in check.bound()


def test_one_sided_check_without_guard_fails_past_target() -> None:
    check = run_all.Check("seconds", ("x",), None, 2.0, "s")
    assert check.verdict(1.9) == "ok"
    assert check.verdict(2.1) == "FAIL"
    assert check.bound() == "≤ 2"


def test_lookup_walks_dicts_and_lists() -> None:
    data: dict[str, Any] = {"a": [{"b": 3}]}
    assert run_all._lookup(data, ("a", 0, "b")) == 3
    assert run_all._lookup(data, ("a", 5, "b")) is None


def test_breakdown_counts_concurrent_attempts_once() -> None:
    report = {
        "lifecycle": {"cold_start_s": 30.0, "teardown": {"seconds": 1.0}},
        "gates": [
            {"gate": "smoke", "outcome": "passed", "duration_s": 0.5, "attempts": [{"label": "smoke", "latency_s": 0.4}]},
            {"gate": "concurrency", "outcome": "passed", "duration_s": 2.5, "measurements": {"wall_s": 2.0},
             "attempts": [{"label": f"concurrent-{i}", "latency_s": 1.9} for i in range(4)]},
        ],
    }
    split = bench_verdict.breakdown(report, wall_s=40.0)
    assert split["gate_requests_s"] == pytest.approx(2.4)
    assert split["harness_overhead_s"] == pytest.approx(40.0 - 30.0 - 2.4)
    assert split["harness_overhead_fraction"] == pytest.approx(7.6 / 40.0)
    assert split["in_gate_overhead_s"] == pytest.approx(0.1 + 0.5)


def test_decode_rate_is_one_over_tpot() -> None:
    figures = bench_fidelity.RequestFigures(prompt_tokens=10, completion_tokens=65, ttft_s=0.5, e2e_s=1.3, ok=True)
    assert figures.decode_tok_s == pytest.approx(64 / 0.8)
    assert bench_fidelity.RequestFigures(10, 1, 0.5, 0.6, True).decode_tok_s is None


def test_bootstrap_interval_brackets_equal_samples() -> None:
    low, high = bench_fidelity.bootstrap_ratio_ci([1.0, 1.1, 0.9, 1.0], [1.0, 0.9, 1.1, 1.0], lambda v: sum(v) / len(v))
    assert low <= 1.0 <= high
