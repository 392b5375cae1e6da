"""One rule for a check the run could not decide, through the real command line: a gate skipped
as ``not measured: ...`` (the load gate's and the ladder's words), a drift check and an A/B's
equivalence that are not measurable each end in the terminal's last vllmqual section, ``not
measured``, with the exit code said; the exit is 0 by default and 1 under ``--vllmqual-strict``;
junit records a skip whose message starts ``not measured:``. A gate skipped because it does not
apply to the recipe is not counted. The gates need no server."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_reference_option import earlier

ROOT = Path(__file__).resolve().parents[2]
LOAD_WORDS = ("not measured: level 3: goodput between 97.0% and 100.0% (minimum 99%): the client read the "
              "answers late and the server's buckets straddle the SLO")

GATES = f'''
import pytest


def test_load(gate):
    pytest.skip({LOAD_WORDS!r})


def test_kv_pool(gate):
    pass


def test_tools(gate):
    pytest.skip("not applicable to recipe tiny-cpu: it sets no gates.tools")
'''

APPLICABLE_ONLY = '''
import pytest


def test_kv_pool(gate):
    pass


def test_tools(gate):
    pytest.skip("not applicable to recipe tiny-cpu: it sets no gates.tools")
'''


def session(pytester: pytest.Pytester, gates: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_gates=gates)
    return pytester.runpytest_subprocess(f"--vllmqual-recipes-dir={ROOT / 'fixtures' / 'recipes'}",
                                         f"--vllmqual-reports-dir={pytester.path / 'reports'}",
                                         "-p", "no:cacheprovider", *args)


def last_section(result: pytest.RunResult) -> tuple[str, list[str]]:
    """The title of the terminal's last vllmqual section and its lines (up to pytest's own stats line)."""
    lines = result.stdout.lines
    starts = [i for i, line in enumerate(lines) if line.startswith("=") and " vllmqual: " in line]
    assert starts, result.stdout.str()
    title = lines[starts[-1]].strip("= ")
    body = [line for line in lines[starts[-1] + 1:] if line and not line.startswith("=")]
    return title, body


def test_a_load_level_not_measured_is_said_last_and_exits_0(pytester: pytest.Pytester) -> None:
    result = session(pytester, GATES, "--recipe=tiny-cpu", f"--junitxml={pytester.path / 'junit.xml'}")
    assert result.ret == 0, result.stdout.str()
    title, body = last_section(result)
    assert title == "vllmqual: not measured", result.stdout.str()
    assert body == [f"gate load (tiny-cpu): {LOAD_WORDS}",
                    "1 check not measured: not a pass and not a failure (exit 0; --vllmqual-strict makes it exit 1)"]
    cases = {case.get("name"): case for case in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    skipped = cases["test_load"].find("skipped")
    assert skipped is not None and str(skipped.get("message")).startswith("not measured: level 3"), \
        ET.tostring(cases["test_load"], encoding="unicode")


def test_strict_makes_a_not_measured_check_exit_1(pytester: pytest.Pytester) -> None:
    result = session(pytester, GATES, "--recipe=tiny-cpu", "--vllmqual-strict")
    assert result.ret == 1, result.stdout.str() + result.stderr.str()
    title, body = last_section(result)
    assert title == "vllmqual: not measured"
    assert body[-1] == "1 check not measured: not a pass; --vllmqual-strict makes that exit 1 (exit 1)"


def test_a_gate_not_applicable_is_not_counted_even_when_strict(pytester: pytest.Pytester) -> None:
    result = session(pytester, APPLICABLE_ONLY, "--recipe=tiny-cpu", "--vllmqual-strict")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    title, _ = last_section(result)
    assert title != "vllmqual: not measured"


def test_a_drift_not_measurable_is_said_last_and_strict_exits_1(pytester: pytest.Pytester) -> None:
    reference = earlier(pytester.path / "then")
    result = session(pytester, APPLICABLE_ONLY, "--recipe=tiny-cpu", f"--vllmqual-reference={reference}")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    title, body = last_section(result)
    assert title == "vllmqual: not measured", result.stdout.str()
    assert body[0].startswith("drift against earlier.json: not measured: compare.promotion tokens: this run ran "
                              "no equivalence probe"), body
    (junit,) = (pytester.path / "reports").glob("tiny-cpu-*.drift.xml")
    verdict = next(c for c in ET.parse(junit).iter("testcase") if c.get("name") == "verdict")
    skipped = verdict.find("skipped")
    assert skipped is not None and str(skipped.get("message")).startswith(
        "not measured: drift against earlier.json: not measurable"), ET.tostring(verdict, encoding="unicode")
    strict = session(pytester, APPLICABLE_ONLY, "--recipe=tiny-cpu", f"--vllmqual-reference={reference}",
                     "--vllmqual-strict")
    assert strict.ret == 1, strict.stdout.str() + strict.stderr.str()


def test_an_ab_whose_equivalence_is_not_measurable_says_so_in_junit_and_last(pytester: pytest.Pytester) -> None:
    result = session(pytester, APPLICABLE_ONLY, "--ab=tiny-cpu,tiny-cpu-4096")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    title, body = last_section(result)
    assert title == "vllmqual: not measured", result.stdout.str()
    assert body[0].startswith("equivalence (A/B comparison): not measured: compare.promotion tokens: "), body
    (junit,) = (pytester.path / "reports").glob("comparison-*.xml")
    verdict = next(c for c in ET.parse(junit).iter("testcase") if c.get("name") == "verdict")
    skipped = verdict.find("skipped")
    assert skipped is not None and str(skipped.get("message")).startswith("not measured: equivalence: not measurable"), \
        ET.tostring(verdict, encoding="unicode")
