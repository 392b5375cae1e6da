"""One arm's public report: built from its typed run record, decided, and written; and the other
files a run leaves beside it (the HTML pages, the campaign record) and its terminal summary.

The session decides when each is written; this module only builds and writes what it is given,
so it needs nothing above the report layer (a comparison arrives as an already-built dict).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pytest_vllmqual.atomic_io import write_text_atomic
from pytest_vllmqual.hashing import canonical_json
from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.records import RunRecord
from pytest_vllmqual.report.decision import decide, public_record, with_decision
from pytest_vllmqual.report.html_page import render_html
from pytest_vllmqual.report.on_disk import write_report_atomic
from pytest_vllmqual.report.public import build_public_report, resanitize
from pytest_vllmqual.report.summary import summary_lines

__all__ = ["ReportHooks", "arm_report", "hooked_arm_report", "summary_sections", "write_arm_report",
           "write_campaign_record", "write_html"]


def arm_report(record: RunRecord, *, sanitizer: Sanitizer, tool_version: str) -> dict[str, Any]:
    """The sanitized public report of one arm, with its decision block.

    The decision is made on the arm's public record (the sanitized report as typed records), so
    its sentences quote only what the report may show, and rendered into the report once.
    """
    report = build_public_report(record, sanitizer=sanitizer, tool_version=tool_version)
    return with_decision(report, decide(public_record(report)))


class ReportHooks(Protocol):
    """What a conftest may do to a report before it is written (the plugin's two report hooks)."""

    def generate(self, record: RunRecord) -> dict[str, Any] | None:
        """A report built in place of the default one, or None to keep the default."""

    def update(self, report: dict[str, Any]) -> object:
        """Change the report in place (add under ``extensions``, or redact)."""


def hooked_arm_report(record: RunRecord, *, sanitizer: Sanitizer, tool_version: str,
                      hooks: ReportHooks | None) -> dict[str, Any]:
    """The arm's report as the hooks leave it: ``hooks.generate`` may replace the default one and
    ``hooks.update`` may change it in place; what a hook touched is sanitized again, so a hook
    cannot leak a secret (the schema check follows when it is written)."""
    if hooks is None:
        return arm_report(record, sanitizer=sanitizer, tool_version=tool_version)
    report = hooks.generate(record) or arm_report(record, sanitizer=sanitizer, tool_version=tool_version)
    hooks.update(report)
    return resanitize(report, sanitizer=sanitizer)


def write_arm_report(report: Mapping[str, Any], path: Path) -> Path:
    """Validate one arm's report against the schema, then write it atomically (nothing on failure)."""
    return write_report_atomic(report, path)


def write_html(report: Mapping[str, Any], path: Path, *, comparison: Mapping[str, Any] | None = None) -> Path:
    """The human-readable page beside the JSON, rendered from the sanitized report only (and the
    comparison, for the page beside comparison.json)."""
    return write_text_atomic(render_html(report, comparison=comparison), path, what="HTML report")


def write_campaign_record(record: Mapping[str, Any], path: Path) -> Path:
    """The campaign record (which arm ran and why), as sorted JSON, written atomically."""
    return write_text_atomic(canonical_json(record, compact=False, indent=2) + "\n", path, what="campaign record")


def summary_sections(arms: Iterable[tuple[str, dict[str, Any], Path | None]], *,
                     comparison: tuple[str, Path | None] | None = None) -> list[tuple[str, list[str]]]:
    """The terminal summary: (title, lines) per (title, report, path) of an arm, then the A/B
    comparison from its rendered markdown and where it was written."""
    sections = [(title, summary_lines(report, path)) for title, report, path in arms]
    if comparison is not None:
        markdown, path = comparison
        sections.append(("A/B comparison", [*markdown.splitlines(), f"comparison: {path}"]))
    return sections
