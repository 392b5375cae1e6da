"""One attempt of one job on one node, and how its result becomes an outcome.

An attempt is what Ray ran (or refused to run): the job, the node it was pinned to or landed
on, the overrides it ran with, when it was submitted and started, and its outcome. Outcomes
never overclaim: an attempt whose node went away is ``lost`` (never ``passed``), one that ran
out of time is ``deadline``, one whose report fails the report schema is ``invalid_report``
and its report is dropped. A job that passed with gates a declaration excused (declared not
applicable by the recipe, measured failing) is ``passed`` with a reason that names them: they
were excused, not passed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.errors import ReportError
from pytest_vllmqual.fleet.spec import JobSpec
from pytest_vllmqual.records import Word

__all__ = ["JobAttempt", "JobOutcome", "evaluate_result"]


class JobOutcome(Word):
    """What became of a job's attempt (a fleet row's outcome; a gate's is ``records.GateOutcome``)."""

    PASSED = "passed"
    FAILED = "failed"
    LOST = "lost"
    ERROR = "error"
    DEADLINE = "deadline"
    CANCELLED = "cancelled"
    NOT_STARTED = "not_started"
    INVALID_REPORT = "invalid_report"


@dataclass
class JobAttempt:
    """One Ray task of a job (or the reason none was submitted); one request of a gate is ``records.Attempt``."""

    attempt_id: str
    job: JobSpec
    number: int
    recipe_arg: str
    overrides: tuple[str, ...]
    cpus: float
    gpus: int
    pinned_node: str | None = None
    recipe_sha256: str | None = None
    ref: Any = None
    node_id: str | None = None
    submitted_epoch: float | None = None
    submitted_mono: float | None = None
    started_epoch: float | None = None
    finished_epoch: float | None = None
    outcome: JobOutcome | None = None
    reason: str | None = None
    pending_reason: str | None = None
    cancel_as: JobOutcome | None = None
    result: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] | None = None
    retried_as: str | None = None
    floor: bool = False
    """The job's second run on a node that already runs it: what the node gives against itself."""
    sidecar: bytes | None = None

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def finish(self, outcome: JobOutcome, reason: str | None, at: float) -> None:
        self.outcome, self.reason, self.finished_epoch = outcome, reason, at


def _failed_gates(report: dict[str, Any]) -> list[str]:
    return [str(g.get("gate")) for g in report.get("gates") or [] if g.get("outcome") in ("failed", "error")]


def _excused_text(report: dict[str, Any]) -> str | None:
    """A passed job's words when a declaration excused some of its gates (declared not applicable,
    measured failing): they did not pass, and the row says so; None when none was excused."""
    from pytest_vllmqual.report.decision import declared_failing, no_gate_failed, public_record

    excused = declared_failing(public_record(report))
    return no_gate_failed(excused) if excused else None


def _report_problem(text: str) -> tuple[dict[str, Any] | None, str | None]:
    from pytest_vllmqual.report.on_disk import validate_report

    try:
        report = json.loads(text)
    except ValueError:
        return None, "the node's report is not valid JSON; it was left out of the fleet record"
    try:
        validate_report(report, where="the node's report")
    except ReportError as exc:
        return None, f"{str(exc).splitlines()[0]}; it was left out of the fleet record"
    return report, None


def evaluate_result(attempt: JobAttempt, result: dict[str, Any], at: float) -> None:
    """Turn what the node sent back into the attempt's outcome (and its validated report)."""
    attempt.result = {k: v for k, v in result.items() if k not in ("report_text", "sidecar_bytes")}
    attempt.sidecar = result.get("sidecar_bytes") if isinstance(result.get("sidecar_bytes"), bytes) else None
    exit_code = result.get("exit_code")
    report, problem = (None, None) if result.get("report_text") is None else \
        _report_problem(str(result["report_text"]))
    status = (report.get("run") or {}).get("status") if report is not None else None
    passed = exit_code == 0 and status == "complete"
    if result.get("node_lost") and not passed:
        # The node's raylet died while pytest ran, and pytest ended with it (the worker lived long
        # enough to answer): that says nothing about the recipe, so the attempt is lost, not failed.
        attempt.finish(JobOutcome.LOST, f"the attempt's node went away mid-job (its raylet ended; pytest exit "
                                        f"{exit_code}); its partial results stay on that node", at)
        return
    if result.get("report_text") is None:
        outcome = JobOutcome.DEADLINE if result.get("timed_out") else JobOutcome.ERROR
        attempt.finish(outcome, f"pytest ended (exit {exit_code}) without writing a report; its output stays in "
                                "the node's work folder", at)
        return
    if report is None:
        attempt.finish(JobOutcome.INVALID_REPORT, str(problem), at)
        return
    attempt.report = report
    if result.get("timed_out"):
        attempt.finish(JobOutcome.DEADLINE, f"the job ran past its deadline of {attempt.job.deadline_s:g} s; the "
                                            f"run is {status}", at)
    elif passed:
        attempt.finish(JobOutcome.PASSED, _excused_text(report), at)
    else:
        failed = _failed_gates(report)
        what = f"gates failed: {', '.join(failed)}" if failed else f"run status {status}"
        attempt.finish(JobOutcome.FAILED, f"pytest exit {exit_code}; {what}", at)
