"""The page and the terminal summary say no more than the record holds. A carried-forward report
whose decision today's rules decide differently (``decision_recomputed``) leads with the recomputed
decision and keeps the decision the run wrote, as written, labelled as the stored one; a row of
the results table follows its gate's outcome."""

from __future__ import annotations

import html
import json
import re
from typing import Any

from support import ROOT

from pytest_vllmqual.report.html_page import render_html, result_rows
from pytest_vllmqual.report.summary import summary_lines

EXAMPLE = ROOT / "reports" / "examples" / "gpu-tp1" / "tiny-gpu.json"


def example() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(EXAMPLE.read_text())
    return data


def items(page: str, list_id: str) -> list[str]:
    match = re.search(rf'<ul id="{list_id}">(.*?)</ul>', page, re.S)
    assert match, f"list {list_id} missing"
    return [html.unescape(i) for i in re.findall(r"<li>(.*?)</li>", match.group(1), re.S)]


def test_the_page_of_the_committed_unpinned_example_leads_with_the_recomputed_decision() -> None:
    report = example()
    stored, again = report["decision"], report["decision_recomputed"]["decision"]
    assert stored != again and "the run is not pinned" in " ".join(again["reasons"])
    page = render_html(report)
    assert items(page, "decision-reasons") == again["reasons"], "the decision shown first is the recomputed one"
    assert items(page, "does-not-prove") == again["does_not_prove"]
    assert page.index('id="decision-reasons"') < page.index('id="stored-decision"') < page.index(
        'id="stored-decision-reasons"')
    assert "The decision the run wrote (stored)" in page
    assert items(page, "stored-decision-reasons") == stored["reasons"], "the stored block is kept as written"
    assert items(page, "stored-does-not-prove") == stored["does_not_prove"]
    assert items(page, "stored-proves") == stored["proves"]


def test_a_recomputed_verdict_that_differs_leads_the_badge_and_the_title() -> None:
    report = example()
    report["decision"] = {**report["decision"], "verdict": "promotable", "summary": "promotable; no-promotion"}
    page = render_html(report)
    assert 'id="verdict">healthy<' in page and 'id="stored-verdict">promotable<' in page
    assert page.index('id="verdict"') < page.index('id="stored-verdict"')
    assert "<title>vllmqual: tiny-gpu (tiny-gpu) — healthy</title>" in page


def test_a_report_whose_decision_stands_shows_one_decision() -> None:
    report = {k: v for k, v in example().items() if k != "decision_recomputed"}
    page = render_html(report)
    assert items(page, "decision-reasons") == report["decision"]["reasons"]
    assert "stored-decision" not in page and "Decided again" not in page


def test_the_summary_of_the_committed_unpinned_example_leads_with_the_recomputed_decision() -> None:
    report = example()
    stored, again = report["decision"], report["decision_recomputed"]
    rules = f"{again['rules']} ({again['date']})"
    decided = f"  decided again by the rules of {rules}: healthy — {'; '.join(again['decision']['reasons'])}"
    written = f"  the decision the run wrote (stored): healthy — {'; '.join(stored['reasons'])}"
    lines = summary_lines(report, None)
    assert lines[0].endswith("verdict: healthy") and lines[1:3] == [decided, written]
    report["decision"] = {**stored, "verdict": "promotable"}
    lines = summary_lines(report, None)
    assert lines[0].endswith("verdict: healthy"), "the verdict shown first is the recomputed one"
    assert lines[2] == written.replace("(stored): healthy", "(stored): promotable")
    plain = summary_lines({k: v for k, v in example().items() if k != "decision_recomputed"}, None)
    assert plain[0].endswith("verdict: healthy") and not any("decided again" in line for line in plain)


def test_the_cold_start_row_says_a_start_past_the_recipes_ceiling_failed() -> None:
    """The results table's "Cold managed start" row said "Passed health in ... seconds" from the
    lifecycle alone, also where the cold_start gate failed the recipe's ceiling."""
    report = example()
    gate = next(g for g in report["gates"] if g["gate"] == "cold_start")
    why = "cold start took 117.1 s, above the recipe's ceiling of 100 s (startup.cold_start_max_s)"
    gate.update(outcome="failed", reason=why, summary=None, proves=None)
    row = next(r for r in result_rows(report) if r[0] == "Cold managed start")
    assert row == ("Cold managed start", f"Failed: {why}", "fail")
    gate.update(outcome="skipped", reason="not judged: recipe tiny-gpu sets no startup.cold_start_max_s, so the "
                "cold start of 117.1 s is recorded but held to no ceiling")
    row = next(r for r in result_rows(report) if r[0] == "Cold managed start")
    assert row == ("Cold managed start", f"Skipped: {gate['reason']}", "skip")


def test_the_gate_table_of_a_carried_forward_example_says_what_its_measurements_prove_today() -> None:
    """A committed record keeps each gate's "proves" as its run wrote it; the page words a passed gate
    from its measurements by today's registry, so an older, stronger sentence is not repeated."""
    report = example()
    stored = next(g for g in report["gates"] if g["gate"] == "quality_tools")
    assert stored["proves"] == "the same typed tool call was made correctly 3/3"
    page = render_html(report)
    row = re.search(r"<tr><td>quality_tools</td>.*?</tr>", page, re.S)
    assert row is not None and "made correctly" not in row.group(0)
    assert "argument values were not compared with the expected ones" in html.unescape(row.group(0))
