"""The load gate in the public report, the summary and the HTML page: its own section with
the formulas, validated by the schema, one row per level, the search, the SLO lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support import ROOT
from support.report_samples import blank_sanitizer, reference_control_run, with_every_gate_passed

from pytest_vllmqual.gates.load_stats import RequestFigures, level_figures
from pytest_vllmqual.records import GateRecord, RunRecord
from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.html_page import render_html
from pytest_vllmqual.report.public import build_public_report, validation_errors
from pytest_vllmqual.report.summary import summary_lines

SLO = {"ttft_ms": 200.0, "tpot_ms": 50.0}


def level_row(level: int, ttft: float, *, phase: str = "promoted", queued: bool = False) -> dict[str, Any]:
    requests = [RequestFigures.from_times(ok=True, ttft_s=ttft, e2e_s=ttft + 0.3, completion_tokens=16,
                                          output_times=[ttft + 0.02 * i for i in range(16)], prompt_tokens=128)
                for _ in range(32)]
    figures = level_figures(level, requests, wall_s=4.0, slo=SLO)
    figures.row.update(phase=phase, met_slo=figures.meets(99), above_max_num_seqs=queued, warmup_ok=True)
    return figures.row


def load_record(arm: str, rows: list[dict[str, Any]], *, outcome: str = "passed", search: bool = False) -> GateRecord:
    measurements: dict[str, Any] = {"load_levels": rows, "promoted_levels": [1, 8], "levels_met": [1, 8],
                                    "slos_set_by": "operator", "max_num_seqs": 8, "max_at_slo": None}
    if search:
        measurements.update(max_at_slo=16, max_first_failing=32, max_ceiling=64, max_search_steps=2,
                            max_search_tried=[16, 32], max_search_converged=False)
    return GateRecord(nodeid="suites/test_load.py::test_load", gate="load", title="Load at SLO (goodput)", arm=arm,
                      outcome=outcome, duration_s=12.0, summary="2/2 promoted levels met the SLOs",
                      measurements=measurements, thresholds={**SLO, "min_goodput_pct": 99, "errors": 0,
                                                              "levels": [1, 8]}, markers=["load"])


def build(run: RunRecord) -> dict[str, Any]:
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer()))
    assert validation_errors(report) == []
    return report


def run_with_load(tmp_path: Path, **kwargs: Any) -> RunRecord:
    run = reference_control_run(tmp_path / "private")
    rows = [level_row(1, 0.05), level_row(8, 0.12), level_row(16, 0.15, phase="search", queued=True),
            level_row(32, 0.9, phase="search", queued=True)]
    run.gates.append(load_record(run.arm, rows, **kwargs))
    return with_every_gate_passed(run)


def test_the_report_has_a_load_section_with_the_formulas_and_one_row_per_level(tmp_path: Path) -> None:
    report = build(run_with_load(tmp_path, search=True))
    load = report["load"]
    assert [row["level"] for row in load["levels"]] == [1, 8, 16, 32]
    assert load["slo"] == {"ttft_ms": 200.0, "tpot_ms": 50.0, "e2e_s": None} and load["min_goodput_pct"] == 99
    assert "(last_output_s - ttft_s) / (completion_tokens - 1)" in load["definitions"]["tpot_s"]
    assert load["search"] == {"max_at_slo": 16, "first_failing": 32, "ceiling": 64, "steps": 2, "tried": [16, 32],
                              "converged": False}
    assert [row["met_slo"] for row in load["levels"]] == [True, True, True, False]
    gate = next(g for g in report["gates"] if g["gate"] == "load")
    assert "load_levels" not in gate["measurements"], "the levels are reported once, in the section"
    assert gate["family"] == "load"
    assert gate["proves"].startswith("at 1, 8 requests in flight (sustained), at least 99% of the requests met "
                                     "TTFT <= 200 ms, TPOT <= 50 ms, with no errors; the highest level found at SLO was 16")
    assert report["decision"]["verdict"] == "promotable"


def test_a_report_without_a_load_gate_has_no_section(tmp_path: Path) -> None:
    report = build(with_every_gate_passed(reference_control_run(tmp_path / "private")))
    assert "load" not in report


def test_the_summary_names_the_levels_and_the_bounded_search(tmp_path: Path) -> None:
    lines = summary_lines(build(run_with_load(tmp_path, search=True)), None)
    line = next(line for line in lines if line.startswith("load:"))
    assert line == ("load: 2/2 promoted levels met the SLOs (1, 8 in flight); lowest goodput 100.0%; max at SLO 16 "
                    "of ceiling 64 (a lower bound: the search's steps ran out)")


def test_the_html_page_plots_latency_against_concurrency_with_the_slo_lines(tmp_path: Path) -> None:
    page = render_html(build(run_with_load(tmp_path, search=True)))
    assert '<svg id="load-plot"' in page and '<table id="load-table">' in page
    assert page.count('class="slo-line"') == 3, "TTFT SLO, TPOT SLO and the goodput minimum"
    assert "SLO 200 ms" in page and "SLO 50 ms" in page
    assert "32 queued" in page, "a level above max_num_seqs is marked on the axis"
    assert page.count('class="goodput-bar"') == 4
    assert "Highest level at SLO found: <b>16</b>" in page


def test_the_ab_compares_each_promoted_level_against_the_noise_floor(tmp_path: Path) -> None:
    from support.report_samples import reference_candidate_run

    from pytest_vllmqual.ab.compare import compare_reports, comparison_errors
    from pytest_vllmqual.ab.rows import BOUNDED, LOAD_ABOVE_FLOOR

    control_run = run_with_load(tmp_path / "a")
    candidate_run = with_every_gate_passed(reference_candidate_run(tmp_path / "b" / "private"))
    # level 1: TTFT 2% slower (below the 5% floor); level 8: TTFT 50% slower
    candidate_run.gates.append(load_record(candidate_run.arm, [level_row(1, 0.051), level_row(8, 0.18)]))
    quiet = blank_sanitizer()
    comparison = compare_reports(build(control_run), build(candidate_run), sanitizer=quiet)
    assert comparison_errors(comparison) == []
    rows = {row["key"]: row for row in comparison["rows"]}
    ttft_1, ttft_8 = rows["load:00001:ttft_p95_s"], rows["load:00008:ttft_p95_s"]
    assert ttft_1["measurement"] == "Load 1 in flight: TTFT p95" and ttft_1["kind"] == "load"
    assert ttft_1["values"] == ["50.0 ms", "51.0 ms"] and ttft_1["change"] == "+2.000%" and ttft_1["label"] == BOUNDED
    assert ttft_8["change"] == "+50.000%" and ttft_8["label"] == LOAD_ABOVE_FLOOR
    assert rows["load:00008:goodput_pct"]["change"] == "unchanged"
    assert "load:00016:ttft_p95_s" not in rows, "searched levels are not compared, only promoted ones"


def test_the_decision_names_the_load_it_did_not_measure_and_placeholder_slos(tmp_path: Path) -> None:
    run = run_with_load(tmp_path, search=True)
    next(g for g in run.gates if g.gate == "load").measurements["slos_set_by"] = "placeholder"
    items = build(run)["decision"]["does_not_prove"]
    assert "sustained load above 16 requests in flight within the SLOs" in items
    assert ("load at an operator's target: the load levels and SLOs are placeholders, not in the reference "
            "campaign") in items


def test_slos_nobody_stated_are_a_caveat_in_the_decision_and_on_the_page(tmp_path: Path) -> None:
    """Until a recipe says operator, the report says whose SLOs the load was judged against."""
    run = run_with_load(tmp_path)
    next(g for g in run.gates if g.gate == "load").measurements["slos_set_by"] = "not stated"
    report = build(run)
    caveat = ("load at an operator's target: the recipe does not say who set the load levels and SLOs "
              "(gates.load.slos_set_by), so they are not taken as an operator's target")
    assert caveat in report["decision"]["does_not_prove"]
    assert "Caveat: the recipe does not say who set the load levels and SLOs" in render_html(report)
    operator = build(run_with_load(tmp_path / "op"))
    assert not any("operator's target" in item for item in operator["decision"]["does_not_prove"])
    assert "Caveat:" not in render_html(operator)


def test_a_passed_load_gate_replaces_the_burst_bound_in_what_is_not_proven(tmp_path: Path) -> None:
    """The concurrency burst proved 4 at once; a passed load gate held 16 within SLOs: saying
    'concurrency beyond 4' beside 'sustained load above 16' would understate what was measured."""
    items = build(run_with_load(tmp_path, search=True))["decision"]["does_not_prove"]
    assert "sustained load above 16 requests in flight within the SLOs" in items
    assert not any(item.startswith("concurrency beyond") for item in items)


def test_the_ab_names_the_candidates_sustained_load_bound() -> None:
    from pytest_vllmqual.ab.compare import compare_reports

    folder = ROOT / "reports" / "examples" / "gpu-tp1" / "ab-131k"
    control, candidate, replay = (json.loads((folder / name).read_text()) for name in (
        "A-control-8192.json", "B-candidate-4096.json", "A2-replay-8192.json"))
    quiet = blank_sanitizer()
    does_not = compare_reports(control, candidate, replay=replay, sanitizer=quiet)["decision"]["does_not_prove"]
    assert "sustained load above 8 requests in flight within the SLOs" in does_not
    assert not any(item.startswith("concurrency beyond") for item in does_not)
