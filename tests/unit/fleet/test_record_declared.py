"""A fleet job whose report has gates a declaration excused (declared not applicable, measured
failing) passed as pytest said, and its row and the fleet's decision say which gates were
excused: they are not counted as passed."""

from __future__ import annotations

import json
import time
from typing import Any

from support import ROOT

from pytest_vllmqual.fleet.attempts import JobAttempt, JobOutcome, evaluate_result
from pytest_vllmqual.fleet.record import build_record, validate_record
from pytest_vllmqual.fleet.spec import JobSpec, Placement, PlacementMode

REPORT = ROOT / "reports" / "examples" / "gpu-tp1" / "verdicts-2026-12-04" / "tiny-gpu.json"
JOB = JobSpec(name="tiny", recipe="tiny-gpu", placement=Placement(PlacementMode.ANY), markers="", node_overrides=())
EXCUSED = "measured failing under a declaration: quality_intelligence, quality_session_recall"


def _attempt() -> JobAttempt:
    attempt = JobAttempt(attempt_id="tiny-a1", job=JOB, number=1, recipe_arg="tiny-gpu", overrides=(), cpus=2.0, gpus=1,
                         node_id="id1", recipe_sha256="a" * 64, submitted_epoch=time.time() - 60,
                         started_epoch=time.time() - 59)
    evaluate_result(attempt, {"exit_code": 0, "timed_out": False, "elapsed_s": 58.0, "run_id": "r",
                              "report_text": REPORT.read_text(), "private": {"files": 1, "manifest_sha256": "b" * 64}},
                    time.time())
    return attempt


def _record(attempt: JobAttempt) -> dict[str, Any]:
    record = build_record(fleet={"name": "f", "description": "", "file_sha256": "c" * 64, "max_parallel": 1,
                                 "run_id": "x"}, attempts=[attempt], labels={"id1": ("node-1", "0" * 12)},
                          nodes=[{"node": "node-1", "node_id_sha256": "0" * 12, "cpus": 16, "gpus": 1}],
                          interrupted=False, started=time.time() - 70, finished=time.time(), mode="address")
    validate_record(record)
    return record


def test_a_job_with_excused_gates_passed_and_says_which_were_excused() -> None:
    declared = [g["gate"] for g in json.loads(REPORT.read_text())["gates"]
                if (g.get("measurements") or {}).get("measured_outcome") == "failed"]
    assert declared, "the example must carry declared gates measured failing"
    attempt = _attempt()
    assert attempt.outcome is JobOutcome.PASSED
    assert attempt.reason is not None and EXCUSED in attempt.reason, attempt.reason
    record = _record(attempt)
    row = record["rows"][0]
    assert row["gates"]["excused_by_declaration"] == len(declared), row["gates"]
    assert row["gates"]["not_applicable"] == sum(1 for g in json.loads(REPORT.read_text())["gates"]
                                                 if g["outcome"] == "skipped") - len(declared)
    assert any(EXCUSED in line for line in record["decision"]["proves"]), record["decision"]["proves"]
