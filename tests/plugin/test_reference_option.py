"""``--vllmqual-reference`` through the real command line: it is listed in --help, and a reference
that cannot be used (missing, not a report, no probe, a sidecar changed since, or beside an A/B)
is a clear usage error before any server starts."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from support.equivalence_samples import attach_probe, probe_body
from test_bad_input import assert_clean_usage_error, assert_nothing_started, run

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "tests" / "unit" / "data" / "reference_reports"


def earlier(folder: Path, *, probe: bool = True) -> Path:
    report = json.loads((REPORTS / "control-8192.json").read_text())
    if probe:
        attach_probe(report, folder, "earlier", probe_body())
    path = folder / "earlier.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report))
    return path


def test_help_lists_the_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    text = result.stdout.str()
    assert "--vllmqual-reference=REPORT.json" in text and "drift:" in text


def test_a_missing_reference_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--recipe=tiny-cpu", "--vllmqual-reference", "nope.json")
    assert_clean_usage_error(result, "the reference", "nope.json does not exist", "Fix:")
    assert_nothing_started(pytester)


def test_a_reference_without_a_probe_is_a_usage_error(pytester: pytest.Pytester) -> None:
    path = earlier(pytester.path / "then", probe=False)
    result = run(pytester, "--recipe=tiny-cpu", f"--vllmqual-reference={path}")
    assert_clean_usage_error(result, "ran no equivalence probe", "Fix: pass the report of a run that included")
    assert_nothing_started(pytester)


def test_a_reference_whose_sidecar_changed_is_a_usage_error(pytester: pytest.Pytester) -> None:
    path = earlier(pytester.path / "then")
    sidecar = path.parent / "earlier.probe.json.gz"
    sidecar.write_bytes(gzip.compress(gzip.decompress(sidecar.read_bytes()).replace(b'"synthetic"', b'"edited"')))
    result = run(pytester, "--recipe=tiny-cpu", f"--vllmqual-reference={path}")
    assert_clean_usage_error(result, "earlier.probe.json.gz does not match the SHA-256 the report recorded")
    assert_nothing_started(pytester)


def test_a_relative_reference_is_read_from_where_pytest_runs(pytester: pytest.Pytester) -> None:
    earlier(pytester.path / "then")
    sidecar = pytester.path / "then" / "earlier.probe.json.gz"
    sidecar.unlink()
    result = run(pytester, "--recipe=tiny-cpu", "--vllmqual-reference=then/earlier.json")
    assert_clean_usage_error(result, "its probe sidecar earlier.probe.json.gz is not beside the report")


def test_a_reference_beside_an_ab_is_a_usage_error(pytester: pytest.Pytester) -> None:
    path = earlier(pytester.path / "then")
    result = run(pytester, "--ab=tiny-cpu,tiny-cpu-4096", f"--vllmqual-reference={path}")
    assert_clean_usage_error(result, "--vllmqual-reference holds one run against an earlier one; --ab plans")
    assert_nothing_started(pytester)
