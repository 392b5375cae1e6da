"""The HTML page: the reference campaign's tables carry every figure, plots mark each rung kind, all is escaped.

A real-browser check (Chromium screenshot and DOM) is tests/integration/test_html_chromium.py.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from support import ROOT
from support.report_samples import blank_sanitizer, reference_candidate_run, reference_control_run

from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.html_page import per_rank, render_html, teardown_text
from pytest_vllmqual.report.html_svg import nice_ticks
from pytest_vllmqual.report.public import build_public_report


def build(run: Any) -> dict[str, Any]:
    return with_decision(build_public_report(run, sanitizer=blank_sanitizer()))


def table_rows(page: str, table_id: str) -> list[list[str]]:
    """Cell texts of one table, unescaped."""
    match = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S)
    assert match, f"table {table_id} missing"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", match.group(1), re.S)
    return [[html.unescape(c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)] for row in rows]


@pytest.fixture
def control(tmp_path: Path) -> dict[str, Any]:
    return build(reference_control_run(tmp_path / "control"))


def test_gate_result_table_reads_like_the_reference_campaign(control: dict[str, Any]) -> None:
    rows = dict((r[0], r[1]) for r in table_rows(render_html(control), "gate-results")[1:])
    assert rows["Cold managed start"] == "Passed health in 323.5 seconds"
    assert rows["Reasoning prompt contract"] == "Passed: Low/high/max fingerprints passed at 6/85/98 prompt tokens"
    assert rows["Functional preflight"] == ("6/6: smoke, JSON, 20/20 tool calls, streaming tool, tool-result "
                                            "continuation, Responses API")
    assert rows["Repeated high-reasoning quality"] == ("Passed: Intelligence 2 checks × 3/3; session recall 3/3; "
                                                       "tools 3/3; 32K context pass")
    assert rows["Near-limit capacity"] == ("119,503 actual prompt tokens; 17.445 s TTFT; 17.886 s E2E; "
                                           "7,537 effective prefill tok/s; 73.86 decode tok/s")
    assert rows["GPU KV allocation"] == ("15.27 GiB, 283,917 tokens, reported 2.17× capacity at the configured "
                                         "131,072-token envelope")
    assert rows["Teardown"].startswith("Clean: no surviving process, 0 /dev/shm files, 0 containers left")
    assert rows["Route and promotion"] == "No route or promotion changed"
    assert rows["Identity"].startswith("Verified: runtime 0.11.2.dev280")


@pytest.mark.parametrize(("arm", "expected"), [
    ("control", {"Minimum-rank KV allocation": "15.27 GiB", "Engine-reported GPU KV tokens": "283,917",
                 "Reported 131K concurrency": "2.17x", "Peak activation per rank": "1.73 GiB",
                 "Weight allocation per rank": "75.64 GiB", "Functional preflight": "6/6",
                 "Largest actual prompt": "119,503", "Largest-request TTFT": "17.445 s",
                 "Largest-request effective prefill": "7,537 tok/s", "Largest-request decode": "73.86 tok/s",
                 "Cold managed start": "323.5 s"}),
    ("candidate", {"Minimum-rank KV allocation": "15.99 GiB", "Engine-reported GPU KV tokens": "553,243",
                   "Reported 131K concurrency": "4.22x", "Peak activation per rank": "1.14 GiB",
                   "Weight allocation per rank": "75.51 GiB", "Functional preflight": "6/6",
                   "Largest actual prompt": "119,503", "Largest-request TTFT": "17.364 s",
                   "Largest-request effective prefill": "7,344 tok/s", "Largest-request decode": "75.20 tok/s"}),
])
def test_measurement_table_carries_every_reference_figure(tmp_path: Path, arm: str, expected: dict[str, str]) -> None:
    run = reference_control_run(tmp_path) if arm == "control" else reference_candidate_run(tmp_path)
    rows = dict((r[0], r[1]) for r in table_rows(render_html(build(run)), "measurements")[1:])
    for measurement, value in expected.items():
        assert rows[measurement] == value, measurement


def test_per_rank_values_are_shown_once_when_equal_and_per_rank_when_not() -> None:
    ranks: list[dict[str, Any]] = [{"rank": 0, "kv": 15.27}, {"rank": 1, "kv": 15.31}, {"rank": 2, "other": 1}]
    assert per_rank(ranks, "kv") == "15.27 / 15.31 GiB (rank 0 / rank 1)"
    equal: list[dict[str, Any]] = [{"rank": 0, "w": 75.64}, {"rank": 1, "w": 75.64}]
    assert per_rank(equal, "w") == "75.64 GiB"
    assert per_rank(ranks, "absent") == "n/a"


def test_ladder_plot_marks_completed_failed_and_rejected_rungs(control: dict[str, Any]) -> None:
    page = render_html(control)
    svg = re.search(r'<svg id="ladder-plot".*?</svg>', page, re.S)
    assert svg
    body = svg.group(0)
    assert '<g id="ladder-ttft"' in body and '<g id="ladder-prefill"' in body and '<g id="ladder-legend"' in body
    # 4 completed rungs, 1 failed, 1 expected rejection; two panels plus one legend marker each
    assert body.count('class="pt pt-ok"') == 4 * 2 + 1
    assert body.count('class="pt pt-failed"') == 1 * 2 + 1
    assert body.count('class="pt pt-rejected"') == 1 * 2 + 1
    assert "120K: no API-reported size; placed at the target 120,000" in html.unescape(body)
    assert "API-reported prompt tokens" in body


def test_memory_chart_stacks_weights_kv_activation_and_graph_per_rank(control: dict[str, Any]) -> None:
    page = render_html(control)
    svg = re.search(r'<svg id="memory-chart".*?</svg>', page, re.S)
    assert svg
    body = svg.group(0)
    assert '<g id="memory-rank-0"' in body and '<g id="memory-rank-1"' in body
    for segment in ("seg-weights", "seg-kv", "seg-activation", "seg-graph"):
        assert body.count(segment) == 2, segment
    assert "rank 1: KV cache 15.31 GiB" in body


def test_everything_is_escaped(tmp_path: Path) -> None:
    run = reference_control_run(tmp_path)
    next(g for g in run.gates if g.gate == "quality").summary = '<script>alert("x")</script>'
    run.ladder[0].target_label = "<b>117.5K</b>"
    run.recipe_name = "r&d <recipe>"
    page = render_html(build(run))
    assert "<script" not in page and "<b>117.5K" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "r&amp;d &lt;recipe&gt;" in page


def test_page_is_self_contained(control: dict[str, Any]) -> None:
    page = render_html(control)
    assert page.startswith("<!DOCTYPE html>")
    for external in ("src=", "href=", "<link", "<script", "@import", "url("):
        assert external not in page


def test_comparison_hook_renders_a_reference_style_ab_table(control: dict[str, Any]) -> None:
    comparison = {"title": "Batch-token A/B", "arms": ["8,192 control", "4,096 candidate"], "verdict": "no-promotion",
                  "rows": [{"measurement": "Minimum-rank KV allocation", "values": ["15.27 GiB", "15.99 GiB"],
                            "change": "+0.72 GiB / +4.715%"},
                           {"measurement": "Engine-reported GPU KV tokens", "values": ["283,917", "553,243"],
                            "change": "+269,326 / +94.861%"}],
                  "notes": ["<one request per target>"]}
    page = render_html(control, comparison=comparison)
    rows = table_rows(page, "comparison-table")
    assert rows[0] == ["Measurement", "8,192 control", "4,096 candidate", "Change"]
    assert rows[1] == ["Minimum-rank KV allocation", "15.27 GiB", "15.99 GiB", "+0.72 GiB / +4.715%"]
    assert "&lt;one request per target&gt;" in page
    assert 'id="comparison"' not in render_html(control)


def test_a_minimal_report_renders_without_plots(tmp_path: Path) -> None:
    run = reference_control_run(tmp_path)
    run.ladder, run.engine, run.gates = [], {}, []
    page = render_html(build(run))
    assert "No capacity ladder ran." in page and 'id="ladder-plot"' not in page
    assert "No per-rank engine facts were read" in page and 'id="memory-chart"' not in page
    assert render_html({}).startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(("high", "ticks"), [(20.0, [0, 5, 10, 15, 20]), (137000.0, [0, 50000, 100000, 150000]),
                                             (93.3, [0, 20, 40, 60, 80, 100]), (0.0, [0, 1])])
def test_nice_ticks(high: float, ticks: list[float]) -> None:
    assert nice_ticks(high) == ticks


def test_page_says_where_the_recipe_and_each_fact_came_from(control: dict[str, Any]) -> None:
    """A discovered recipe, --vllmqual-set overrides and per-fact sources are on the page."""
    import copy

    discovered = copy.deepcopy(control)
    discovered["recipe"]["origin"] = "discovered"
    discovered["engine"]["sources"] = {"kv_cache_tokens": "metrics", "ranks": "not observable from the endpoint"}
    page = render_html(discovered)
    assert "<b>discovered</b> from the running server" in page and "nothing was pinned" in page
    assert 'id="fact-sources"' in page and "not observable from the endpoint" in page
    overridden = copy.deepcopy(control)
    overridden["recipe"].update(origin="file", overrides=["serve.max_num_seqs=4"], file_sha256="ab" * 32)
    page = render_html(overridden)
    assert "<code>serve.max_num_seqs=4</code>" in page and "ab" * 32 in page
    sources = [c.get("source") for c in control["identity"]["checks"] if c.get("source")]
    assert all(html.escape(s) in render_html(control) for s in sources)


TINY_CPU = ROOT / "tests" / "fleet" / "data" / "tiny-cpu-report.json"


def test_a_tiny_cpu_page_reads_in_words_never_as_python_prints_a_record() -> None:
    """A plain tiny-cpu run's record: the teardown row and the lifecycle table write lists, yes/no
    and the reclaim's own sentence; the memory legend names what no rank measured as such."""
    page = render_html(json.loads(TINY_CPU.read_text()))
    teardown = dict((r[0], r[1]) for r in table_rows(page, "gate-results")[1:])["Teardown"]
    assert teardown == ("Clean: no surviving process, 0 /dev/shm files, 0 containers left (1.2 s); shm reclaim: "
                        "reclaimed 2 unmapped files (8,389,120 bytes); clean postcondition; files reclaimed: "
                        "vllm_dist_20e7fc6ad5f3444289f0483ad700710c-tp:0-[0-1]-cpushm_0 (4,194,560 bytes), "
                        "vllm_dist_20e7fc6ad5f3444289f0483ad700710c-tp:0-[0-1]-cpushm_1 (4,194,560 bytes)")
    life = dict((r[0], r[1]) for r in table_rows(page, "lifecycle-table")[1:])
    assert (life["Teardown: clean"], life["Teardown: stopped"]) == ("yes", "yes")
    assert (life["Teardown: surviving process names"], life["Teardown: notes"]) == ("none", "none")
    legend = re.search(r'<g id="memory-legend">(.*?)</g>', page, re.S)
    assert legend
    words = re.findall(r"<text[^>]*>(.*?)</text>", legend.group(1))
    assert words == ["KV cache", "Weights: not measured", "Peak activation: not measured"]


def test_teardown_row_without_the_reclaim_s_sentence_names_each_fact() -> None:
    row = teardown_text({"clean": False, "surviving_processes": 2, "surviving_process_names": ["vllm", "python"],
                         "shm_leftover_files": 1, "shm_reclaim": {"scanned": 3, "remaining": [],
                                                                  "postcondition_clean": True}})
    assert row == ("Not clean: 2 surviving processes (vllm, python), 1 /dev/shm files, 0 containers; "
                   "shm reclaim: scanned 3; remaining none; postcondition clean yes")
    assert teardown_text({"clean": False}).startswith("Not clean: surviving processes not counted, /dev/shm not checked")
