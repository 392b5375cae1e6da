"""An equivalence section as junit: the verdict and each figure pass, fail, or are skipped with a
message that starts ``not measured:``, by the one rule."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from pytest_vllmqual.report.junit import equivalence_junit


def figure(name: str, status: str) -> dict[str, object]:
    return {"figure": name, "label": name, "point": 0.0, "low": 0.0, "high": 1.0, "threshold": 0.5, "status": status}


def test_inconclusive_is_skipped_as_not_measured_and_beyond_fails() -> None:
    section = {"verdict": "inconclusive", "figures": [figure("top1", "within"), figure("flips", "undecided"),
                                                      figure("kl", "not shown"), figure("rms", "not measured")]}
    root = ET.fromstring(equivalence_junit(section, "drift: inconclusive: flips undecided", name="drift"))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "5" and suite.get("failures") == "0"
    assert suite.get("skipped") == "3"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["verdict"][0].tag == "skipped"
    assert cases["verdict"][0].get("message") == "not measured: drift: inconclusive: flips undecided"
    assert str(cases["flips"][0].get("message")).startswith("not measured: flips 0.0 [0.0, 1.0] against 0.5")
    assert len(cases["top1"]) == len(cases["kl"]) == 0
    beyond = ET.fromstring(equivalence_junit({"verdict": "not equivalent", "figures": [figure("top1", "beyond")]},
                                             "equivalence: not equivalent")).find("testsuite")
    assert beyond is not None and beyond.get("failures") == "2"
