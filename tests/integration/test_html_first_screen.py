"""The report's first screen in a real headless Chromium at 1280x800: the operator's answer first.

An operator opening a run's page should see, without scrolling, whether the run can be promoted,
what stops it, and the key figures (cold start, largest exact prompt, KV pool, load at SLO). The
page has no script of its own; the test adds one, to a copy, that measures where those elements
are laid out and writes the boxes into the DOM, which ``--dump-dom`` hands back. Chromium is
required, as for the other browser test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support import ROOT
from test_html_chromium import _chromium, _run_chromium

from pytest_vllmqual.cli import main

WIDTH, HEIGHT = 1280, 800
EXAMPLES = ROOT / "reports" / "examples"
RUN_PAGE = ("#promotion-answer", "#blockers", "#key-figures")
KEY_FIGURES = ("Cold start", "Largest exact prompt", "KV pool", "Load at SLO")

_MEASURE = """<script>(function(){
var out={width:innerWidth,height:innerHeight,boxes:{}};
SELECTORS.forEach(function(s){var e=document.querySelector(s);if(!e){out.boxes[s]=null;return;}
var r=e.getBoundingClientRect();out.boxes[s]={top:r.top,bottom:r.bottom,text:e.innerText||e.textContent||""};});
var p=document.createElement('pre');p.id='first-screen-boxes';p.textContent=JSON.stringify(out);
document.body.appendChild(p);})();</script>"""


def _boxes(page: Path, selectors: tuple[str, ...], tmp_path: Path) -> dict[str, Any]:
    """Where each selector's element lies in a 1280x800 window, and its text, as Chromium lays it out."""
    probe = tmp_path / f"measured-{page.name}"
    script = _MEASURE.replace("SELECTORS", json.dumps(list(selectors)))
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", script + "</body>"), encoding="utf-8")
    dom = _run_chromium(_chromium(), tmp_path / "profile", f"--window-size={WIDTH},{HEIGHT}", "--dump-dom",
                        probe.as_uri()).stdout
    start = dom.index('<pre id="first-screen-boxes">') + len('<pre id="first-screen-boxes">')
    measured: dict[str, Any] = json.loads(dom[start:dom.index("</pre>", start)].replace("&quot;", '"')
                                          .replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert measured["width"] == WIDTH, measured["width"]
    return measured


def _assert_on_first_screen(measured: dict[str, Any]) -> None:
    for selector, box in measured["boxes"].items():
        assert box is not None, f"{selector}: not on the page"
        assert box["bottom"] <= HEIGHT, f"{selector} ends at y={box['bottom']:.0f}, below the first {HEIGHT} px"


def _rendered(example: Path, tmp_path: Path) -> Path:
    page = tmp_path / example.with_suffix(".html").name
    assert main(["report", str(example), "-o", str(page)]) == 0
    return page


def test_a_healthy_run_answers_promotion_blockers_and_key_figures_in_the_first_viewport(tmp_path: Path) -> None:
    """The committed tiny-gpu run (healthy; no-promotion, unpinned, with a load gate)."""
    measured = _boxes(_rendered(EXAMPLES / "gpu-tp1" / "tiny-gpu.json", tmp_path), RUN_PAGE, tmp_path)
    _assert_on_first_screen(measured)
    boxes = measured["boxes"]
    assert boxes["#promotion-answer"]["text"].startswith("Can this run be promoted? No"), boxes["#promotion-answer"]
    assert "not pinned" in boxes["#blockers"]["text"], boxes["#blockers"]["text"]
    for figure in KEY_FIGURES:
        assert figure in boxes["#key-figures"]["text"], figure


def test_a_failed_run_with_a_probe_answers_first_with_short_blockers(tmp_path: Path) -> None:
    """The committed SmolLM2 CPU control arm: two quality gates failed, an equivalence probe recorded."""
    example = EXAMPLES / "cpu-smollm2" / "A-smollm2-cpu-20261204T184444Z.json"
    measured = _boxes(_rendered(example, tmp_path), RUN_PAGE, tmp_path)
    _assert_on_first_screen(measured)
    boxes = measured["boxes"]
    assert boxes["#promotion-answer"]["text"].startswith("Can this run be promoted? No"), boxes["#promotion-answer"]
    blockers = boxes["#blockers"]["text"]
    assert "quality_session_recall failed" in blockers and "quality_long_context failed" in blockers
    assert "Equivalence" in boxes["#key-figures"]["text"]


def test_the_comparison_page_says_its_answer_first(tmp_path: Path) -> None:
    """The committed SmolLM2 CPU comparison page: the comparison's verdict leads, above the arm's page."""
    page = EXAMPLES / "cpu-smollm2" / "comparison.html"
    measured = _boxes(page, ("#promotion-answer", "#comparison-answer"), tmp_path)
    _assert_on_first_screen(measured)
    assert "comparison" in measured["boxes"]["#comparison-answer"]["text"].lower()


def test_the_fleet_page_says_its_answer_first(tmp_path: Path) -> None:
    page = EXAMPLES / "gpu-tp1" / "fleet-one-node" / "fleet.html"
    measured = _boxes(page, ("section.decision .badge",), tmp_path)
    _assert_on_first_screen(measured)

