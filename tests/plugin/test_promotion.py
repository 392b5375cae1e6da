"""The promotion rule through the real command line: an A/B ends with the rule that may block and
the three layers, and the terminal, the comparison JSON, its junit and its HTML page say the same
words (the record holds every status; the others only show it). The gates need no server."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from itertools import pairwise

import pytest
from test_not_measured import APPLICABLE_ONLY, session

from pytest_vllmqual.not_measured import not_measured


def _sections(result: pytest.RunResult) -> dict[str, list[str]]:
    lines = result.stdout.lines
    starts = [i for i, line in enumerate(lines) if line.startswith("=") and " vllmqual: " in line] + [len(lines)]
    return {lines[a].strip("= "): [line for line in lines[a + 1:b] if line and not line.startswith("=")]
            for a, b in pairwise(starts)}


def test_an_ab_ends_with_the_rule_and_three_layers_said_alike_everywhere(pytester: pytest.Pytester) -> None:
    result = session(pytester, APPLICABLE_ONLY, "--ab=tiny-cpu,tiny-cpu-4096")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    sections = _sections(result)
    titles = list(sections)
    assert titles[-2:] == ["vllmqual: promotion (A/B comparison)", "vllmqual: not measured"], titles
    terminal = sections["vllmqual: promotion (A/B comparison)"]
    (path,) = (pytester.path / "reports").glob("comparison-*.json")
    promotion = json.loads(path.read_text())["equivalence"]["promotion"]
    assert promotion["rule"] == "tokens" and promotion["status"] == "not measured"
    assert terminal[0].startswith("promotion (compare.promotion tokens; the default, today's rule)") and \
        terminal[0].endswith(f"not measured: {promotion['reasons'][0]}")
    assert [f"  layer {layer['layer']}: {layer['verdict']} ({layer['status']}): {layer['reason']}"
            for layer in promotion["layers"]] == terminal[1:4]
    assert [layer["layer"] for layer in promotion["layers"]] == ["tokens", "tasks", "depth"]
    cases = {(c.get("classname"), c.get("name")): c for c in ET.parse(path.with_suffix(".xml")).iter("testcase")}
    for layer in promotion["layers"]:
        skipped = cases[("equivalence.layer", layer["layer"])].find("skipped")
        assert skipped is not None and skipped.get("message") == not_measured(f"{layer['verdict']}: {layer['reason']}")
    page = path.with_suffix(".html").read_text()
    assert 'id="equivalence-promotion-status">not measured<' in page
    assert 'id="equivalence-promotion-rule">tokens<' in page
