"""`make bench`'s guard rule can fail: a figure past its guard fails whatever its interval says.

The figures of the run that exposed the old rule (2026-12-04: output-throughput ratios 1.22
[0.85, 1.49] and 1.46 [0.98, 1.60], both passed as "noisy") are fed to the checks here and
must fail; so must a readiness delay past 0.5 s. Also the arithmetic behind the new figures:
readiness without its own completion, per-request output rate, per-round pairs, CPU by phase.
No server, no timing: the figures are given.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import (
    bench_verdict,
    fidelity_common,
    fidelity_readiness,
    fidelity_tools,
    recompute_fidelity,
    run_all,
)

RATIO = run_all.Check("ratio", ("x",), 0.97, 1.03, ci_path=("ci",), guard=(0.9, 1.1))


@pytest.mark.parametrize(("value", "interval"), [(1.22, [0.85, 1.49]), (1.46, [0.98, 1.60]), (0.85, [0.6, 1.2]),
                                                 (1.17, [1.04, 1.28])])
def test_a_ratio_past_its_guard_fails_even_when_its_interval_reaches_the_target(value: float,
                                                                                interval: list[float]) -> None:
    assert RATIO.verdict(value, {"ci": interval}) == "FAIL"


def test_within_the_guard_the_interval_decides_between_noisy_and_missed() -> None:
    assert RATIO.verdict(1.0, {"ci": [0.5, 1.5]}) == "ok"
    assert RATIO.verdict(1.06, {"ci": [1.0, 1.12]}) == "noisy"
    assert RATIO.verdict(1.06, {"ci": [1.05, 1.07]}) == "missed"
    assert RATIO.verdict(0.91, {"ci": [0.89, 0.99]}) == "noisy"
    assert RATIO.verdict(1.06) == "missed"  # no interval recorded: nothing softens it


def test_a_figure_without_guard_fails_past_its_target_whatever_its_interval() -> None:
    check = run_all.Check("one-sided", ("x",), None, 0.5, "s", ci_path=("ci",))
    assert check.verdict(0.49) == "ok"
    assert check.verdict(0.51, {"ci": [0.1, 0.9]}) == "FAIL"


def test_an_unguarded_figure_is_reported_never_ok_never_failed_and_says_why() -> None:
    check = run_all.Check("wall", ("x",), 0.97, 1.03, unguarded="cannot be measured stably here")
    assert check.verdict(1.46) == "reported"
    assert check.verdict(1.0) == "reported"
    assert check.verdict(None) == "missing"  # not measured still fails the run
    assert check.bound() == "none (reported)"
    rows = run_all.evaluate({"x": 1.46}, ["s"], {"s": [check]})
    assert rows[0]["verdict"] == "reported" and rows[0]["unguarded"] == "cannot be measured stably here"


def _fidelity_results(output_rate: float, wall: float, ci: list[float]) -> dict[str, object]:
    ratios = {"median_ttft": 1.0, "paced_median_decode_tok_s": 1.0, "paced_output_throughput": wall,
              "paced_median_output_tok_s_per_request": output_rate, "harness_ttft_vs_server_histogram": 1.05}
    ci95 = {"median_ttft": [0.99, 1.01], "paced_median_decode_tok_s": [0.98, 1.02], "paced_output_throughput": ci,
            "paced_median_output_tok_s_per_request": ci}
    readiness = {"readiness_detection_s": 0.3, "ready_after_startup_complete_s": 2.55,
                 "readiness_completion_s": 2.25}
    return {"fidelity": {"summary": [{"ratios": ratios, "ci95": ci95}], "readiness": readiness,
                         "client_at_max_chunk_rate": {"client_core_fraction": 0.1},
                         "client_cpu_per_chunk_vs_vllm_bench": {"ratio": 0.7},
                         "server_calibration": {"max_abs_error": 0}}}


def test_the_shipped_fidelity_checks_fail_the_past_runs_figures() -> None:
    checks = {"fidelity": run_all.build_checks(concurrencies=(1,))["fidelity"]}
    rows = {r["figure"]: r["verdict"] for r in run_all.evaluate(_fidelity_results(1.22, 1.22, [0.85, 1.49]),
                                                                ["fidelity"], checks)}
    assert rows["fidelity c=1: median per-request output tok/s at the server's pace, harness / vllm bench"] == "FAIL"
    # The pass-wall figure keeps its guard too (a ratio against vLLM bench is never only reported).
    assert rows["fidelity c=1: output throughput (pass wall clock) at the server's pace, harness / vllm bench"] == "FAIL"
    # Readiness: 2.55 s after the log line is reported; the harness's own 0.3 s delay is judged.
    assert rows["readiness returned after the log's 'Application startup complete.'"] == "reported"
    assert rows["readiness detection delay after 'Application startup complete.' (its completion excluded)"] == "ok"
    rows = {r["figure"]: r["verdict"] for r in run_all.evaluate(_fidelity_results(1.0, 1.0, [0.95, 1.05]),
                                                                ["fidelity"], checks)}
    assert rows["fidelity c=1: median per-request output tok/s at the server's pace, harness / vllm bench"] == "ok"


def test_every_shipped_guarded_check_can_fail() -> None:
    """No guard that cannot fail: every check that is not only reported has a finite bound."""
    for checks in run_all.CHECKS.values():
        for check in checks:
            if check.unguarded is None:
                assert check.low is not None or check.high is not None, check.name
                probe = (check.high if check.high is not None else check.low) or 0.0
                past = probe + 1e6 if check.high is not None else probe - 1e6
                assert check.verdict(past, {}) == "FAIL", check.name


def test_readiness_split_takes_the_completion_out_of_the_delay() -> None:
    # The log line at 10.0; a refused probe, then the answered one sent at 10.15 returning at 12.4;
    # ready noted at 12.55.
    split = fidelity_readiness.readiness_split(10.0, 12.55, [(9.9, 9.95, False), (10.15, 12.4, True)])
    assert split["readiness_completion_s"] == pytest.approx(2.25)
    assert split["readiness_detection_s"] == pytest.approx(0.30)
    assert split["readiness_completions"] == 2
    assert fidelity_readiness.readiness_split(None, 12.55, [(10.15, 12.4, True)])["readiness_detection_s"] is None
    assert fidelity_readiness.readiness_split(10.0, 12.55, [(10.15, 12.4, False)])["readiness_detection_s"] is None


def test_per_request_output_rate_includes_ttft() -> None:
    request = fidelity_common.RequestFigures(1024, 128, 0.05, 0.33, True)
    assert request.output_tok_s == pytest.approx(128 / 0.33)
    assert fidelity_common.RequestFigures(1024, None, 0.05, 0.33, True).output_tok_s is None


def test_paired_round_ratios_pair_passes_of_the_same_round() -> None:
    def one_pass(tool: str, r: int, duration: float) -> fidelity_common.PassResult:
        reqs = [fidelity_common.RequestFigures(1024, 128, 0.05, 0.3, True)] * 2
        return fidelity_common.PassResult(tool, 1, r, reqs, duration)

    pairs = fidelity_tools.paired_round_ratios([one_pass("harness", 0, 1.0), one_pass("harness", 1, 2.0)],
                                               [one_pass("vllm_bench", 1, 1.0), one_pass("vllm_bench", 0, 2.0)])
    assert [(p["round"], p["ratio"]) for p in pairs] == [(0, pytest.approx(2.0)), (1, pytest.approx(0.5))]


def test_the_pass_wall_throughput_ratio_is_the_median_of_the_rounds_paired_ratios() -> None:
    """Run 6 of 2026-12-05 (c=1, tok/s per round): the pooled ratio compared the harness's slow
    round 0 with vLLM bench's round 1 and failed the guard; each round's own pair did not."""
    def one_pass(tool: str, r: int, tok_s: float) -> fidelity_common.PassResult:
        reqs = [fidelity_common.RequestFigures(1024, 128, 0.05, 0.9, True)] * 9
        return fidelity_common.PassResult(tool, 1, r, reqs, 9 * 128 / tok_s, workload="decode")

    harness = [one_pass("harness", r, tok_s) for r, tok_s in enumerate((123.8, 122.6, 144.4))]
    vllm_bench = [one_pass("vllm_bench", r, tok_s) for r, tok_s in enumerate((134.3, 138.8, 146.8))]
    summary = fidelity_tools.summarize([*harness, *vllm_bench], 1)
    assert summary["ratios"]["pooled_output_throughput"] == pytest.approx(123.8 / 138.8)
    assert summary["ratios"]["output_throughput"] == pytest.approx(123.8 / 134.3)
    (check,) = [c for c in run_all.CHECKS["fidelity"] if c.name.startswith("fidelity c=1: output throughput")]
    assert check.verdict(summary["ratios"]["pooled_output_throughput"]) == "FAIL"
    assert check.verdict(summary["ratios"]["output_throughput"]) == "missed"  # within its guard
    assert fidelity_tools.paired_median_ratio(harness, []) is None


def test_cpu_by_phase_splits_at_ready_and_report_lines() -> None:
    timeline = [(1.0, "collecting", 0.5), (30.0, "[vllmqual] tiny-cpu ready in 28.0 s at http://h:1", 1.5),
                (60.0, "suites/test_smoke.py::test_smoke PASSED", 2.5),
                (70.0, "[vllmqual] report written: r.json", 3.0), (71.0, "1 passed", 3.25)]
    phases = bench_verdict.cpu_by_phase(timeline)
    assert phases["boot"] == {"wall_s": 30.0, "cpu_s": 1.5}
    assert phases["gates"] == {"wall_s": 40.0, "cpu_s": 1.5}
    assert phases["after"] == {"wall_s": 1.0, "cpu_s": 0.25}


def test_harness_cpu_share_is_missed_at_the_measured_figures_and_fails_past_its_guard() -> None:
    (check,) = [c for c in run_all.CHECKS["verdict"] if c.name == "harness process CPU / wall of a full run"]
    assert check.verdict(0.018) == "ok"
    assert check.verdict(0.058) == "missed"  # 2026-12-04, with the openai_sdk and load gates
    assert check.verdict(0.09) == "FAIL"


def test_a_slow_machine_misses_the_collect_wall_and_a_costlier_plugin_fails_its_share() -> None:
    """The two slowed runs of 2026-12-05 (bare pytest 0.46 and 0.66 s instead of 0.37-0.41) missed the
    1 s wall without failing; a plugin whose collection costs twice as much fails on its share."""
    checks = {"client": run_all.build_checks(concurrencies=(1,))["client"]}

    def verdicts(wall: float, bare: float) -> dict[str, str]:
        collect = {"wall_s_median": wall, "plugin_share_of_wall": (wall - bare) / wall}
        results = {"client": {"replay": {"cpu_us_per_chunk": 8.1}, "collect": collect}}
        return {r["figure"]: r["verdict"] for r in run_all.evaluate(results, ["client"], checks)}

    wall, share = "pytest --collect-only -q suites, wall (median)", "pytest --collect-only -q suites: the plugin's share of the wall"
    assert verdicts(1.072, 0.459) == {"client CPU per streamed chunk (replay)": "ok", wall: "missed", share: "ok"}
    assert verdicts(0.891, 0.371)[wall] == "ok"
    assert verdicts(1.41, 0.38)[share] == "FAIL"  # 0.52 s of plugin doubled on an idle machine


def _paced_pass(tool: str, r: int, server_tok_s: float, seen: float) -> fidelity_common.PassResult:
    """A c=1 pass of 9 requests of 128 tokens on a server decoding at ``server_tok_s`` (TTFT 0.1 s);
    the tool reads each rate ``seen`` times the server's own."""
    tpot, ttft = 1 / server_tok_s, 0.1
    e2e = ttft + 127 * tpot / seen
    reqs = [fidelity_common.RequestFigures(1024, 128, ttft, e2e, True, max_gap_s=tpot, first_half_share=0.5)] * 9
    return fidelity_common.PassResult(tool, 1, r, reqs, 9 * e2e, workload="decode", server_ttft_mean_s=ttft,
                                      server_tpot_mean_s=tpot)


def test_the_guarded_rate_ratios_take_the_servers_pace_of_each_pass_out() -> None:
    """Run 11 of 2026-12-06, c=1: the server decoded at 149 tok/s in vLLM bench's pass and 215 in the
    harness's, each tool within a few percent of the server in its own pass. The plain ratios
    compare the two passes' servers; the guarded ones compare the two clients."""
    harness = [_paced_pass("harness", r, 215.0, 1.0) for r in range(3)]
    vllm_bench = [_paced_pass("vllm_bench", r, 149.0, 1.0) for r in range(3)]
    ratios = fidelity_tools.summarize([*harness, *vllm_bench], 1)["ratios"]
    assert ratios["median_decode_tok_s"] == pytest.approx(215 / 149)  # the plain ratio: the servers'
    for key in ("paced_median_decode_tok_s", "paced_median_output_tok_s_per_request", "paced_output_throughput"):
        assert ratios[key] == pytest.approx(1.0), key
    checks = {c.path[-1]: c for c in run_all.build_checks(concurrencies=(1,))["fidelity"]}
    assert checks["paced_median_decode_tok_s"].verdict(ratios["paced_median_decode_tok_s"]) == "ok"
    # A client that reads the same server 12 % slower than the other still fails its guard.
    slow = [_paced_pass("harness", r, 215.0, 0.88) for r in range(3)]
    slow_ratios = fidelity_tools.summarize([*slow, *vllm_bench], 1)["ratios"]
    assert slow_ratios["paced_median_decode_tok_s"] == pytest.approx(0.88)
    assert checks["paced_median_decode_tok_s"].verdict(slow_ratios["paced_median_decode_tok_s"]) == "FAIL"
    assert fidelity_tools.server_pace_tok_s(_paced_pass("harness", 0, 100.0, 1.0), 128) == pytest.approx(128 / 1.37)
    assert fidelity_tools.server_pace_tok_s(fidelity_common.PassResult("harness", 1, 0, [], 1.0), 128) is None


def test_a_stored_result_file_is_recomputed_with_todays_rules(tmp_path: Path) -> None:
    passes = [_paced_pass("harness", r, 215.0, 1.0) for r in range(3)] + \
             [_paced_pass("vllm_bench", r, 149.0, 1.0) for r in range(3)]
    stored = tmp_path / "bench.json"
    stored.write_text(json.dumps({"fidelity": {"passes": [p.to_dict() for p in passes]}}))
    (line,) = recompute_fidelity.recompute(stored)
    assert line == ("bench.json c=1: plain decode/output/pass-wall 1.443 1.379 1.379; "
                    "at the server's pace 1.000 1.000 1.000")
