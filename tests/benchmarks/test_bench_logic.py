"""The benchmarks' own arithmetic: how a figure becomes ok / noisy / missed / FAIL, how a run's
wall time is split, how vLLM bench's detailed result is read, and how the client of another
revision is loaded. Timings themselves are guarded by `make bench`, not here."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from benchmarks import bench_verdict, fidelity_chunk_rate, fidelity_common, fidelity_tools, run_all
from pytest_vllmqual.client.qual_client import QualClient


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
    figures = fidelity_common.RequestFigures(prompt_tokens=10, completion_tokens=65, ttft_s=0.5, e2e_s=1.3, ok=True)
    assert figures.decode_tok_s == pytest.approx(64 / 0.8)
    assert fidelity_common.RequestFigures(10, 1, 0.5, 0.6, True).decode_tok_s is None


def test_bootstrap_interval_brackets_equal_samples() -> None:
    low, high = fidelity_tools.bootstrap_ratio_ci([1.0, 1.1, 0.9, 1.0], [1.0, 0.9, 1.1, 1.0], lambda v: sum(v) / len(v))
    assert low <= 1.0 <= high


def test_vllm_bench_latencies_of_each_version() -> None:
    # 0.32 writes latencies; 0.24 writes ttfts and itls (latency = TTFT + sum of ITLs).
    assert fidelity_common.detailed_latencies({"latencies": [1.5, 2.0], "ttfts": [0.1, 0.2]}) == [1.5, 2.0]
    got = fidelity_common.detailed_latencies({"ttfts": [0.1, None], "itls": [[0.01, 0.02], []]})
    assert got[0] == pytest.approx(0.13) and got[1] is None
    with pytest.raises(RuntimeError, match="neither 'latencies'"):
        fidelity_common.detailed_latencies({"ttfts": [0.1]})


def test_the_client_of_a_revision_is_its_whole_client_folder_beside_this_one() -> None:
    """The reference client's SSE parse and transport are the revision's own, not this tree's."""
    client_class = fidelity_chunk_rate.client_at_revision("HEAD")
    assert client_class is not QualClient and client_class.__name__ == "QualClient"
    module = sys.modules[client_class.__module__]
    assert client_class.__module__ == "vllmqual_client_at_HEAD.qual_client"
    assert module.StreamResult.__module__ == "vllmqual_client_at_HEAD.results"
    assert module.StreamTransport.__module__ == "vllmqual_client_at_HEAD.stream_transport"
    with pytest.raises(RuntimeError, match="no client folder at revision no-such-revision"):
        fidelity_chunk_rate.client_at_revision("no-such-revision")


def test_a_processs_cpu_seconds_and_none_for_a_process_that_is_gone() -> None:
    cpu = fidelity_common.process_cpu_s(os.getpid())
    assert cpu is not None and cpu > 0
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert fidelity_common.process_cpu_s(child.pid) is None


def test_client_cpu_per_chunk_is_the_ratio_of_medians_over_alternating_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two idle runs gave 0.80 and 1.74 from one pass each; three passes each, taking turns, and the
    median of each client: one pass that costs twice as much no longer moves the figure."""
    order: list[str] = []
    # CPU seconds per pass of 100 chunks: the harness's second pass and vLLM bench's first are outliers.
    harness_cpu, vllm_cpu = iter([0.004, 0.009, 0.0041]), iter([0.0021, 0.005, 0.002])

    def figures(tokens: int) -> list[fidelity_common.RequestFigures]:
        return [fidelity_common.RequestFigures(8, tokens, 0.01, 0.5, True)]

    def harness_pass(*_args: Any, label: str, **_kwargs: Any) -> fidelity_common.PassResult:
        order.append(label)
        return fidelity_common.PassResult("harness", 8, 0, figures(100), 1.0, client_cpu_s=next(harness_cpu),
                                          chunks=100)

    def vllm_bench_pass(*_args: Any, label: str, **_kwargs: Any) -> fidelity_common.PassResult:
        order.append(label)
        return fidelity_common.PassResult("vllm_bench", 8, 0, figures(100), 1.0, client_cpu_s=next(vllm_cpu))

    monkeypatch.setattr(fidelity_chunk_rate, "harness_pass", harness_pass)
    monkeypatch.setattr(fidelity_chunk_rate, "vllm_bench_pass", vllm_bench_pass)
    monkeypatch.setattr(fidelity_chunk_rate, "build_prompts", lambda *_a, **_k: [])
    lines: list[str] = []
    out = fidelity_chunk_rate.client_cpu_per_chunk_pairs(
        None, None, private_dir=None, metrics_http=None, concurrency=8, prompt_tokens=128,  # type: ignore[arg-type]
        max_tokens=256, tokenizer="t", workdir=None, progress=lines.append)  # type: ignore[arg-type]
    assert order == ["cpu-harness-r0", "cpu-vllm-r0", "cpu-vllm-r1", "cpu-harness-r1", "cpu-harness-r2",
                     "cpu-vllm-r2"]
    assert out["harness_us_per_chunk"] == pytest.approx(41.0) and out["vllm_bench_us_per_chunk"] == pytest.approx(21.0)
    assert out["ratio"] == pytest.approx(41.0 / 21.0)
    assert out["ratio_range"] == [pytest.approx(90.0 / 50.0), pytest.approx(41.0 / 20.0)]  # one round: 1.80-2.05
    assert len(out["rounds"]) == 3 and "median of 3 rounds" in lines[0]
