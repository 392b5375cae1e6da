"""The one HTML kit both pages use (a run's report, a fleet record): a value is escaped exactly once,
markup a caller built passes as Markup, and values a person reads are written in words."""

from __future__ import annotations

import pytest

from pytest_vllmqual.fleet.pages import render_fleet_html
from pytest_vllmqual.records import Verdict
from pytest_vllmqual.report.html_kit import Markup, bullets, esc, page, table
from pytest_vllmqual.report.number_format import readable


def test_a_table_escapes_text_and_keeps_markup_as_built() -> None:
    out = table("t", ["<h>"], [["a<b & c"], [Markup(f"<b>{esc('x<y')}</b>")], [None]], ["fail", "", ""],
                numeric=(0,))
    assert "<th>&lt;h&gt;</th>" in out and '<td class="num">a&lt;b &amp; c</td>' in out
    assert '<td class="num"><b>x&lt;y</b></td>' in out and "&amp;lt;" not in out
    assert '<td class="num">n/a</td>' in out and '<tr class="fail">' in out and out.startswith('<div class="scroll">')


def test_esc_leaves_markup_alone_and_bullets_escape_their_items() -> None:
    built = Markup("<code>a</code>")
    assert esc(built) is built and esc("<code>") == "&lt;code&gt;" and esc(None) == "n/a"
    assert bullets(["<i>", Markup("<i>ok</i>")], "l") == '<ul id="l"><li>&lt;i&gt;</li><li><i>ok</i></li></ul>'
    assert bullets([], "l") == '<p id="l">None.</p>'


def test_a_page_carries_the_shared_look_and_its_own_rules() -> None:
    out = page("a <title>", ["<p>body</p>"], ".mine{}")
    assert "<title>a &lt;title&gt;</title>" in out and "tr.fail td{background:#ffebe9}" in out
    assert out.index("tr.fail td") < out.index(".mine{}") and "<p>body</p>" in out


def test_the_fleet_page_escapes_every_record_value_once() -> None:
    row = {"job": "j<1>", "attempt": 1, "node": "node-1", "recipe": "r&d", "outcome": "failed",
           "reason": "gate <x> failed", "verdict": "no-promotion", "report": {"html": "jobs/a&b.html"},
           "gates": {"passed": 1, "failed": 1, "not_applicable": 0}, "node_overrides": ["serve.a=<1>"]}
    record = {"fleet": {"name": "f<1>"}, "decision": {"verdict": "failed", "proves": ["p & q"]}, "rows": [row],
              "cluster": {"nodes": [{"node": "node-1", "node_id_sha256": "<abc>", "cpus": 2, "gpus": 0}]}}
    out = render_fleet_html(record)
    assert "&amp;amp;" not in out and "&amp;lt;" not in out and "<x>" not in out and "<1>" not in out
    for text in ("<td>j&lt;1&gt;</td>", "<td>r&amp;d</td>", "<b>failed</b><br>gate &lt;x&gt; failed",
                 '<a href="jobs/a&amp;b.html">no-promotion</a>', "<code>serve.a=&lt;1&gt;</code>",
                 "<code>&lt;abc&gt;</code>", "<li>p &amp; q</li>", "<title>vllmqual fleet: f&lt;1&gt; — failed</title>"):
        assert text in out, text


@pytest.mark.parametrize(("value", "words"), [
    (None, "not measured"), (True, "yes"), (False, "no"), ([], "none"), (["a", "b"], "a, b"), (1234567, "1,234,567"),
    (0.638, "0.638"), ({"postcondition_clean": True, "remaining": []}, "postcondition clean yes; remaining none"),
    (Verdict.HEALTHY, "healthy"), ("text", "text"),
])
def test_readable_writes_a_value_in_words(value: object, words: str) -> None:
    assert readable(value) == words


def test_readable_takes_the_caller_s_word_for_a_missing_value() -> None:
    assert readable(None, missing="n/a") == "n/a" and readable([None], missing="-") == "-"
