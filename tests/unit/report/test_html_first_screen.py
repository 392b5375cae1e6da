"""The first screen of a report's page: the promotion answer, what stops it, the key figures, in that order."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from support import ROOT
from support.report_samples import blank_sanitizer, reference_control_run, with_every_gate_passed

from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.html_first_screen import blockers, key_figures
from pytest_vllmqual.report.html_page import render_html
from pytest_vllmqual.report.public import build_public_report

EXAMPLES = ROOT / "reports" / "examples"


def _example(relative: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / relative).read_text(encoding="utf-8"))
    return data


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def test_an_incomplete_qualification_lists_each_gap_as_a_short_blocker() -> None:
    decision = {"verdict": "healthy", "reasons": [
        "every gate that ran passed, but the qualification is incomplete: not every gate passed: load (absent); "
        "the run is not pinned: the recipe says pinned: false"]}
    assert blockers(decision) == ["not every gate passed: load (absent)", "the run is not pinned: the recipe says pinned: false"]


def test_a_reason_with_a_parenthesis_before_the_gaps_still_splits_but_a_quoted_one_does_not() -> None:
    excused = {"verdict": "healthy", "reasons": [
        "every gate that ran passed or was excused by a declaration (measured failing under a declaration: "
        "quality_intelligence), but the qualification is incomplete: not every gate passed: quality_intelligence "
        "(skipped); declared not applicable by the recipe and measured failing in this run: quality_intelligence"]}
    assert blockers(excused) == ["not every gate passed: quality_intelligence (skipped)",
                                 "declared not applicable by the recipe and measured failing in this run: "
                                 "quality_intelligence"]
    quoted = {"verdict": "no-promotion", "reasons": [
        "not a priority-challenger: the candidate is healthy (every gate that ran passed, but the qualification is "
        "incomplete: load (absent); no capacity rung completed)"]}
    (one,) = blockers(quoted)
    assert one.startswith("not a priority-challenger: the candidate is healthy (every gate that ran passed")


def test_a_long_failure_reason_is_cut_and_a_long_list_says_how_many_more() -> None:
    long = "gate quality failed: " + "x" * 400
    cut = blockers({"verdict": "no-promotion", "reasons": [long]})
    assert len(cut) == 1 and len(cut[0]) <= 141 and cut[0].startswith("gate quality failed: x")
    many = blockers({"verdict": "no-promotion", "reasons": [f"gate g{i} failed" for i in range(9)]})
    assert many[:5] == [f"gate g{i} failed" for i in range(5)]
    assert many[5] == "and 4 more (the decision below lists every reason)"


def test_a_promotable_decision_has_no_blocker() -> None:
    assert blockers({"verdict": "promotable", "reasons": ["every gate of the coverage ran and passed"]}) == []


def test_the_run_page_opens_with_the_answer_then_the_figures_then_the_long_lists(tmp_path: Path) -> None:
    report = with_decision(build_public_report(with_every_gate_passed(reference_control_run(tmp_path / "p")),
                                               sanitizer=blank_sanitizer()))
    page = render_html(report)
    answer, figures = page.index('id="promotion-answer"'), page.index('id="key-figures"')
    assert answer < page.index('id="blockers"') < figures < page.index('id="ladder-plot"') < page.index('id="proves"')
    assert page.count('id="ladder-plot"') == 1
    assert "Can this run be promoted? Yes" in _text(page[answer:figures])
    rows = dict(key_figures(report))
    assert rows["Cold start"].startswith("323.5 s to health")
    assert rows["Largest exact prompt"].startswith("119,503 API-reported prompt tokens")
    assert rows["KV pool"].startswith("283,917 tokens, 15.27 GiB on the smallest rank")


def test_a_committed_healthy_example_answers_no_with_its_load_figures() -> None:
    report = _example("gpu-tp1/tiny-gpu.json")
    first = render_html(report).split('id="decision"')[0]
    assert "Can this run be promoted? No" in _text(first)
    assert "the run is not pinned: the recipe says pinned: false" in _text(first)
    assert dict(key_figures(report))["Load at SLO"].startswith("2/2 promoted levels met the SLOs")


def test_the_comparison_page_answers_for_the_comparison_before_the_candidate_alone() -> None:
    folder = EXAMPLES / "cpu-smollm2"
    comparison = _example("cpu-smollm2/comparison.json")
    candidate = _example("cpu-smollm2/B-smollm2-cpu-fp8kv-20261204T184444Z.json")
    page = render_html(candidate, comparison=comparison)
    assert page.index('id="comparison-answer"') < page.index('id="promotion-answer"') < page.index('id="comparison"')
    assert dict(key_figures(candidate, comparison))["Equivalence"].startswith("not equivalent")
    assert (folder / "comparison.html").read_text(encoding="utf-8").count('id="comparison-answer"') == 1
