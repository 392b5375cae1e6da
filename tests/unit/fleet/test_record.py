"""The fleet record from attempts: outcomes, rows, verdict, schema, HTML page and junit.

The report is a sanitized tiny-cpu report recorded from a real fleet run (tests/fleet/data).
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from support import ROOT

from pytest_vllmqual.errors import FleetError
from pytest_vllmqual.fleet.attempts import JobAttempt, JobOutcome, evaluate_result
from pytest_vllmqual.fleet.command import exit_code
from pytest_vllmqual.fleet.pages import render_fleet_html, render_fleet_junit
from pytest_vllmqual.fleet.record import FleetVerdict, build_record, validate_record
from pytest_vllmqual.fleet.spec import JobSpec, Placement, PlacementMode
from pytest_vllmqual.records import Word

SAMPLE = ROOT / "tests" / "fleet" / "data" / "tiny-cpu-report.json"
JOB = JobSpec(name="every", recipe="tiny-cpu", placement=Placement(PlacementMode.EACH_NODE, resource="fleet_node"),
              markers="engine or lifecycle", node_overrides=())


def _attempt(node: str, *, kv: int | None = None, outcome_result: dict[str, Any] | None = None,
             overrides: tuple[str, ...] = ()) -> JobAttempt:
    report = json.loads(SAMPLE.read_text())
    if kv is not None:
        report["engine"]["kv_cache_tokens"] = kv
    attempt = JobAttempt(attempt_id=f"every-{node}-a1", job=JOB, number=1, recipe_arg="tiny-cpu", overrides=overrides,
                         cpus=2.0, gpus=0, node_id=node, recipe_sha256="a" * 64, submitted_epoch=time.time() - 60,
                         started_epoch=time.time() - 59)
    result = outcome_result or {"exit_code": 0, "timed_out": False, "elapsed_s": 58.0, "run_id": "r",
                                "report_text": json.dumps(report), "html_text": "<html></html>",
                                "private": {"files": 12, "manifest_sha256": "b" * 64}}
    evaluate_result(attempt, result, time.time())
    return attempt


LABELS = {f"id{i}": (f"node-{i}", f"{i:012x}") for i in range(1, 4)}


def _record(attempts: list[JobAttempt], interrupted: bool = False) -> dict[str, Any]:
    return build_record(fleet={"name": "f", "description": "", "file_sha256": "c" * 64, "max_parallel": 1,
                               "run_id": "x"}, attempts=attempts, labels=LABELS,
                        nodes=[{"node": label, "node_id_sha256": tag, "cpus": 2, "gpus": 0}
                               for label, tag in LABELS.values()],
                        interrupted=interrupted, started=time.time() - 70, finished=time.time(), mode="address")


@pytest.mark.parametrize("word", [*JobOutcome, *FleetVerdict], ids=str)
def test_the_fleet_s_fixed_words_print_as_their_word(word: JobOutcome | FleetVerdict) -> None:
    """On Python 3.11 a plain (str, Enum) prints "JobOutcome.PASSED" in an f-string."""
    assert isinstance(word, Word)
    assert f"{word}" == str(word) == word.value and f"{word:>20}" == f"{word.value:>20}"


def test_three_nodes_one_with_half_the_kv_is_inconsistent_and_named() -> None:
    attempts = [_attempt("id1"), _attempt("id2"), _attempt("id3", kv=1_048_576, overrides=("serve.x=1",))]
    record = _record(attempts)
    assert all(r["outcome"] == "passed" and r["verdict"] == "healthy" for r in record["rows"])
    assert record["comparisons"][0]["odd_one_out"] == ["node-3"]
    assert record["decision"]["verdict"] == "inconsistent" and record["status"] == "complete"
    row = record["rows"][0]
    assert row["gates"]["passed"] >= 3 and row["cold_start_s"] > 0 and row["private"]["files"] == 12
    assert row["report"]["file"] == "jobs/every-id1-a1.json"


def test_lost_row_makes_the_fleet_incomplete_and_is_never_passed() -> None:
    lost = JobAttempt(attempt_id="every-id2-a1", job=JOB, number=1, recipe_arg="tiny-cpu", overrides=(), cpus=2.0,
                      gpus=0, node_id="id2")
    lost.finish(JobOutcome.LOST, "the attempt's worker or node went away mid-job", time.time())
    record = _record([_attempt("id1"), lost])
    assert record["rows"][1]["outcome"] == "lost" and record["rows"][1]["verdict"] is None
    assert record["decision"]["verdict"] == "incomplete" and record["status"] == "incomplete"
    assert any("lost" in text for text in record["decision"]["does_not_prove"])
    assert record["comparisons"] == []  # one report is no comparison


def test_invalid_report_is_dropped_with_its_reason() -> None:
    report = json.loads(SAMPLE.read_text())
    del report["decision"]
    attempt = _attempt("id1", outcome_result={"exit_code": 0, "timed_out": False, "report_text": json.dumps(report)})
    assert attempt.outcome is JobOutcome.INVALID_REPORT and attempt.report is None
    assert "does not match the report schema" in str(attempt.reason)


def test_no_report_and_a_deadline() -> None:
    no_report = _attempt("id1", outcome_result={"exit_code": 4, "timed_out": False, "report_text": None})
    assert no_report.outcome is JobOutcome.ERROR and "without writing a report" in str(no_report.reason)
    late = _attempt("id1", outcome_result={"exit_code": -15, "timed_out": True,
                                           "report_text": SAMPLE.read_text()})
    assert late.outcome is JobOutcome.DEADLINE


def test_failed_gate_is_a_failed_row() -> None:
    report = json.loads(SAMPLE.read_text())
    report["gates"][0]["outcome"] = "failed"
    report["run"]["status"] = "complete"
    attempt = _attempt("id1", outcome_result={"exit_code": 1, "timed_out": False, "report_text": json.dumps(report)})
    assert attempt.outcome is JobOutcome.FAILED and report["gates"][0]["gate"] in str(attempt.reason)
    assert _record([attempt])["decision"]["verdict"] == "failed"



@pytest.mark.parametrize("report_text", [SAMPLE.read_text(), None], ids=["partial-report", "no-report"])
def test_a_run_ended_with_its_node_is_lost_not_failed(report_text: str | None) -> None:
    # The race a killed raylet leaves: its worker outlives it long enough to send back pytest's
    # exit by a signal (and the report it had written), where Ray usually reports the worker gone.
    attempt = _attempt("id1", outcome_result={"exit_code": -15, "timed_out": False, "node_lost": True,
                                              "report_text": report_text})
    assert attempt.outcome is JobOutcome.LOST and "went away mid-job" in str(attempt.reason)
    assert attempt.report is None
    assert _record([attempt])["decision"]["verdict"] == "incomplete"


def test_a_run_that_passed_before_its_node_died_stays_passed() -> None:
    attempt = _attempt("id1", outcome_result={"exit_code": 0, "timed_out": False, "node_lost": True,
                                              "report_text": SAMPLE.read_text()})
    assert attempt.outcome is JobOutcome.PASSED

def test_schema_refuses_a_host_name_as_node() -> None:
    record = _record([_attempt("id1")])
    bad = copy.deepcopy(record)
    bad["rows"][0]["node"] = "gpu-host-17.example"
    with pytest.raises(FleetError, match="fleet record schema"):
        validate_record(bad)


def test_html_and_junit() -> None:
    record = _record([_attempt("id1"), _attempt("id2"), _attempt("id3", kv=1_048_576)])
    page = render_fleet_html(record)
    assert page.startswith("<!DOCTYPE html>") and "Fleet verdict" in page and "inconsistent" in page
    assert page.count("<tr") == 1 + 3 + 1 + 3 and "node-3 is the odd one out" in page
    assert "http://" not in page and "https://" not in page.replace(record["schema"], "")  # offline
    root = ET.fromstring(render_fleet_junit(record))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["every"] and suites[0].get("tests") == "4"
    assert [c.get("name") for c in suites[0].findall("testcase")] == [f"node-{i}-attempt-1" for i in (1, 2, 3)] + [
        "cross-node"]
    cross = suites[0].findall("testcase")[-1]
    assert suites[0].get("failures") == "1" and "node-3" in str(cross.find("failure").get("message"))  # type: ignore[union-attr]


def test_the_page_shows_each_row_s_stable_node_key() -> None:
    """The node label (node-N) follows discovery order; the key is what names a host across runs."""
    result = {"exit_code": 0, "timed_out": False, "elapsed_s": 58.0, "run_id": "r", "node_key": "label:rack-a-7",
              "report_text": SAMPLE.read_text(), "html_text": "<html></html>",
              "private": {"files": 12, "manifest_sha256": "b" * 64}}
    page = render_fleet_html(_record([_attempt("id1", outcome_result=result), _attempt("id2")]))
    assert ">Node key<" in page and "label:rack-a-7" in page


def test_one_node_is_not_compared_never_consistent_and_says_why() -> None:
    """A job whose reports came from one node has nothing to compare: the verdict is 'not compared'
    (fleet-record/1 said 'consistent' with no comparison), the decision names the job and why, and
    the page and the junit say so."""
    record = _record([_attempt("id1")])
    assert record["comparisons"] == [] and record["decision"]["verdict"] == "not compared"
    assert exit_code(record["decision"], interrupted=False) == 0  # every job passed
    assert record["decision"]["not_compared"] == [
        {"job": "every", "reason": "one node ran the job (node-1): there is no other node's report to compare it with"}]
    assert any("not compared, one node ran the job" in t for t in record["decision"]["does_not_prove"])
    page = render_fleet_html(record)
    assert 'class="decision verdict-not-compared"' in page and "job every: not compared" in page
    suite = ET.fromstring(render_fleet_junit(record)).findall("testsuite")[0]
    cross = suite.findall("testcase")[-1]
    assert cross.get("name") == "cross-node" and suite.get("skipped") == "1"
    assert str(cross.find("skipped").get("message")).startswith("not compared: one node ran the job")  # type: ignore[union-attr]


def test_two_nodes_that_agree_are_consistent_and_nothing_is_left_uncompared() -> None:
    record = _record([_attempt("id1"), _attempt("id2")])
    assert record["decision"]["verdict"] == "consistent" and record["decision"]["not_compared"] == []
    assert exit_code(record["decision"], interrupted=False) == 0
    assert exit_code(record["decision"], interrupted=True) == 130
    assert exit_code(_record([_attempt("id1"), _attempt("id2"), _attempt("id3", kv=1)])["decision"],
                     interrupted=False) == 1
