"""One arm's public report: built from its typed run record, decided, and written."""

from __future__ import annotations

from typing import Any

from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.records import RunRecord
from pytest_vllmqual.report.decision import decide, public_record, with_decision
from pytest_vllmqual.report.public import build_public_report

__all__ = ["arm_report"]


def arm_report(record: RunRecord, *, sanitizer: Sanitizer, tool_version: str) -> dict[str, Any]:
    """The sanitized public report of one arm, with its decision block.

    The decision is made on the arm's public record (the sanitized report as typed records), so
    its sentences quote only what the report may show, and rendered into the report once.
    """
    report = build_public_report(record, sanitizer=sanitizer, tool_version=tool_version)
    return with_decision(report, decide(public_record(report)))
